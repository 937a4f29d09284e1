// kestrel quantize / gguf-info end to end: the quantized tensors are exactly what the library
// quantizer produces, other tensors and metadata are carried over, and bad requests fail cleanly.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "core/files.h"
#include "io/gguf.h"
#include "quant/quant.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::work_path;

int run_cli(const std::string& args) {
  return std::system((test::kestrel_binary() + " " + args + " >/dev/null 2>" + work_path("cli.err")).c_str());
}

TEST(GgufQuantizeCli, QuantizesMatricesAndCopiesTheRest) {
  const std::string in = work_path("cli-in.gguf"), out = work_path("cli-q4k.gguf"), back = work_path("cli-f32.gguf");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<float> w(4 * 512), norm(512);
  for (auto& v : w) v = normal(rng);
  for (auto& v : norm) v = 1.0f + normal(rng);
  {
    GgufWriter g(in);
    g.set("general.architecture", GgufValue::string("test"));
    g.set("test.block_count", GgufValue::u32(1));
    g.set("general.file_type", GgufValue::u32(0));
    g.declare("blk.0.ffn_up.weight", GgmlType::kF32, {4, 512});
    g.declare("blk.0.ffn_norm.weight", GgmlType::kF32, {512});
    g.declare("blk.0.odd.weight", GgmlType::kF32, {2, 100});
    g.declare("blk.0.ffn_gate_inp.weight", GgmlType::kF32, {4, 512});
    g.begin();
    g.write_tensor("blk.0.ffn_up.weight", w.data(), w.size() * 4);
    g.write_tensor("blk.0.ffn_norm.weight", norm.data(), norm.size() * 4);
    g.write_tensor("blk.0.odd.weight", w.data(), 200 * 4);
    g.write_tensor("blk.0.ffn_gate_inp.weight", w.data(), w.size() * 4);
    g.finish();
  }
  ASSERT_EQ(run_cli("quantize -i " + in + " -o " + out + " --type q4_k"), 0) << read_file(work_path("cli.err"));
  const GgufFile q = GgufFile::open(out);
  EXPECT_EQ(q.get_int("test.block_count"), 1);
  const GgufTensor* up = q.find_tensor("blk.0.ffn_up.weight");
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->type, GgmlType::kQ4_K);
  std::vector<uint8_t> expect(ggml_row_bytes(GgmlType::kQ4_K, 512) * 4);
  for (int r = 0; r < 4; ++r) quant::quantize_row(GgmlType::kQ4_K, w.data() + r * 512, 512, expect.data() + r * 144 * 2);
  ASSERT_EQ(up->nbytes, expect.size());
  EXPECT_EQ(0, std::memcmp(up->data, expect.data(), expect.size()));
  EXPECT_EQ(q.find_tensor("blk.0.ffn_norm.weight")->type, GgmlType::kF32);  // 1-D: kept
  EXPECT_EQ(q.find_tensor("blk.0.odd.weight")->type, GgmlType::kF32);       // 100 % 256 != 0: kept
  EXPECT_EQ(q.find_tensor("blk.0.ffn_gate_inp.weight")->type, GgmlType::kF32);  // routers stay F32
  EXPECT_EQ(q.get_int("general.file_type"), 14);                            // Q4_K_S

  // Back to f32: the dequantized values.
  ASSERT_EQ(run_cli("quantize -i " + out + " -o " + back + " --type f32"), 0) << read_file(work_path("cli.err"));
  const GgufFile f = GgufFile::open(back);
  std::vector<float> deq(4 * 512);
  quant::dequantize_row(GgmlType::kQ4_K, expect.data(), 4 * 512, deq.data());
  EXPECT_EQ(0, std::memcmp(f.find_tensor("blk.0.ffn_up.weight")->data, deq.data(), deq.size() * 4));

  EXPECT_EQ(run_cli("gguf-info " + out), 0);
  EXPECT_NE(run_cli("quantize -i " + in + " -o " + out + " --type q3_k"), 0);
  EXPECT_NE(read_file(work_path("cli.err")).find("--type q3_k"), std::string::npos);
  write_file_atomic(work_path("not.gguf"), "{\"json\": true}");
  EXPECT_NE(run_cli("gguf-info " + work_path("not.gguf")), 0);
  EXPECT_NE(read_file(work_path("cli.err")).find("not a GGUF file"), std::string::npos);
}

}  // namespace
}  // namespace kestrel

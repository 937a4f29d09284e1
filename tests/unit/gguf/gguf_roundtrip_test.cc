// GgufWriter -> GgufFile round trips: every metadata value type, plain and block-format
// tensors, alignment, and the crash-safety of the writer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include <unistd.h>

#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"
#include "quant/quant.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::work_path;

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

TEST(GgufRoundTrip, MetadataOfEveryType) {
  const std::string path = work_path("meta.gguf");
  {
    GgufWriter w(path);
    w.set("general.architecture", GgufValue::string("qwen3"));
    w.set("t.u8", GgufValue::u8(200));
    w.set("t.i8", GgufValue::i8(-100));
    w.set("t.u16", GgufValue::u16(60000));
    w.set("t.i16", GgufValue::i16(-30000));
    w.set("t.u32", GgufValue::u32(4000000000u));
    w.set("t.i32", GgufValue::i32(-2000000000));
    w.set("t.u64", GgufValue::u64(uint64_t(1) << 40));
    w.set("t.i64", GgufValue::i64(-(int64_t(1) << 40)));
    w.set("t.f32", GgufValue::f32(1e-6f));
    w.set("t.f64", GgufValue::f64(3.141592653589793));
    w.set("t.bool", GgufValue::boolean(true));
    w.set("t.empty", GgufValue::string(""));
    w.set("t.utf8", GgufValue::string("héllo ✓"));
    w.set("t.strings", GgufValue::strings({"<|im_start|>", "", "Ġthe"}));
    w.set("t.i32s", GgufValue::i32s({1, -2, 3}));
    w.set("t.f32s", GgufValue::f32s({0.5f, -1.25f}));
    w.set("t.noarr", GgufValue::i32s({}));
    w.set("t.replaced", GgufValue::u32(1));
    w.set("t.replaced", GgufValue::u32(2));
    w.begin();
    w.finish();
  }
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");  // file order kept
  EXPECT_EQ(f.get_string("general.architecture"), "qwen3");
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u16"), 60000);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_int("t.u64"), int64_t(1) << 40);
  EXPECT_EQ(f.get_int("t.i64"), -(int64_t(1) << 40));
  EXPECT_EQ(f.find("t.u8")->type(), GgufValueType::kU8);
  EXPECT_EQ(f.get_float("t.f32"), double(1e-6f));
  EXPECT_EQ(f.get_float("t.f64"), 3.141592653589793);
  EXPECT_EQ(f.get_float("t.u32"), 4e9);
  EXPECT_EQ(*f.find("t.bool")->to_bool(), true);
  EXPECT_EQ(f.get_string("t.empty"), "");
  EXPECT_EQ(f.get_string("t.utf8"), "héllo ✓");
  EXPECT_EQ(f.find("t.strings")->strings(), (std::vector<std::string>{"<|im_start|>", "", "Ġthe"}));
  const GgufValue* ints = f.find("t.i32s");
  ASSERT_EQ(ints->size(), 3u);
  EXPECT_EQ(ints->elem_type(), GgufValueType::kI32);
  EXPECT_EQ(*ints->int_at(1), -2);
  EXPECT_FALSE(ints->int_at(3));
  EXPECT_EQ(*f.find("t.f32s")->float_at(1), -1.25);
  EXPECT_EQ(f.find("t.noarr")->size(), 0u);
  EXPECT_EQ(f.get_int("t.replaced"), 2);
  // Typed lookups name the key when it is missing or of the wrong kind.
  try {
    f.get_int("general.architecture");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'general.architecture' is \"qwen3\", expected an integer"), std::string::npos)
        << e.what();
  }
  try {
    f.get_string("qwen3.block_count");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'qwen3.block_count' is missing"), std::string::npos) << e.what();
  }
}

struct TensorCase {
  std::string name;
  GgmlType type;
  std::vector<int64_t> shape;
};

void round_trip_tensors(uint32_t alignment) {
  const std::string path = work_path("tensors-" + std::to_string(alignment) + ".gguf");
  const std::vector<TensorCase> cases = {
      {"token_embd.weight", GgmlType::kQ8_0, {8, 64}},
      {"blk.0.attn_q.weight", GgmlType::kQ4_K, {3, 512}},
      {"blk.0.attn_k.weight", GgmlType::kQ5_K, {2, 256}},
      {"blk.0.ffn_down.weight", GgmlType::kQ6_K, {2, 256}},
      {"blk.0.ffn_down_exps.weight", GgmlType::kMXFP4, {2, 3, 64}},
      {"blk.0.attn_norm.weight", GgmlType::kF32, {7}},
      {"output.weight", GgmlType::kBF16, {5, 3}},
      {"blk.0.ssm_conv1d.weight", GgmlType::kF16, {4, 1, 3}},
  };
  std::vector<std::vector<uint8_t>> payloads;
  {
    GgufWriter w(path, alignment);
    w.set("general.architecture", GgufValue::string("test"));
    for (const auto& c : cases) w.declare(c.name, c.type, c.shape);
    w.begin();
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& c = cases[i];
      int64_t numel = 1;
      for (int64_t d : c.shape) numel *= d;
      const auto x = gaussian(numel, uint32_t(i));
      std::vector<uint8_t> bytes(w.tensor_bytes(c.name));
      const int64_t row = c.shape.back();
      const uint64_t row_bytes = ggml_row_bytes(c.type, row);
      for (int64_t r = 0; r < numel / row; ++r)
        quant::quantize_row(c.type, x.data() + r * row, row, bytes.data() + r * row_bytes);
      if (i % 2 == 0) {
        w.write_tensor(c.name, bytes.data(), bytes.size());
      } else {  // piecewise, row by row, as a streaming converter writes
        w.start_tensor(c.name);
        for (int64_t r = 0; r < numel / row; ++r) w.append(bytes.data() + r * row_bytes, row_bytes);
        w.end_tensor();
      }
      payloads.push_back(std::move(bytes));
    }
    w.finish();
  }
  EXPECT_FALSE(file_exists(path + ".tmp-" + std::to_string(::getpid())));
  const GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.alignment(), alignment);
  EXPECT_EQ(f.data_offset() % alignment, 0u);
  if (alignment != 32) {
    EXPECT_EQ(f.get_int("general.alignment"), int64_t(alignment));
  } else {
    EXPECT_EQ(f.find("general.alignment"), nullptr);
  }
  ASSERT_EQ(f.tensors().size(), cases.size());
  uint64_t expect_offset = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, cases[i].name);
    EXPECT_EQ(t.type, cases[i].type);
    EXPECT_EQ(t.shape, cases[i].shape);
    // Tensors follow each other, each padded to the alignment (the layout llama.cpp expects).
    EXPECT_EQ(t.offset, expect_offset);
    expect_offset += (t.nbytes + alignment - 1) / alignment * alignment;
    ASSERT_EQ(t.nbytes, payloads[i].size());
    EXPECT_EQ(0, std::memcmp(t.data, payloads[i].data(), t.nbytes));
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufRoundTrip, TensorsDefaultAlignment) { round_trip_tensors(32); }
TEST(GgufRoundTrip, TensorsAlignment64) { round_trip_tensors(64); }
TEST(GgufRoundTrip, TensorsAlignment1) { round_trip_tensors(1); }

TEST(GgufRoundTrip, AbandonedWriterLeavesNothing) {
  const std::string path = work_path("abandoned.gguf");
  std::remove(path.c_str());
  {
    GgufWriter w(path);
    w.declare("a", GgmlType::kF32, {4});
    w.begin();
  }
  EXPECT_FALSE(file_exists(path));
  EXPECT_FALSE(file_exists(path + ".tmp-" + std::to_string(::getpid())));
  // An existing file survives an abandoned rewrite untouched.
  {
    GgufWriter w(path);
    w.begin();
    w.finish();
  }
  const std::string before = read_file(path);
  {
    GgufWriter w(path);
    w.set("general.name", GgufValue::string("x"));
    w.declare("a", GgmlType::kF32, {4});
    w.begin();
  }
  EXPECT_EQ(read_file(path), before);
}

TEST(GgufRoundTrip, WriterRefusesBadDeclarations) {
  GgufWriter w(work_path("refused.gguf"));
  w.declare("ok", GgmlType::kQ4_K, {2, 256});
  auto refused = [&](const std::string& name, GgmlType t, std::vector<int64_t> shape, const std::string& needle) {
    try {
      w.declare(name, t, std::move(shape));
      FAIL() << name;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused("ok", GgmlType::kF32, {4}, "declared twice");
  refused("q", GgmlType::kQ4_K, {256, 100}, "row length 100 is not a multiple of 256");
  refused("e", GgmlType::kF32, {}, "0 dimensions");
  refused("z", GgmlType::kF32, {3, 0}, "dimension 0 < 1");
  refused(std::string(64, 'n'), GgmlType::kF32, {1}, "must be 1..63 bytes");
}

}  // namespace
}  // namespace kestrel

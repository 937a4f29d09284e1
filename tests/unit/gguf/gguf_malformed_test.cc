// Malformed GGUF files: each must be refused with an Error naming what is wrong, never read
// out of bounds (the suite also runs under the sanitizer build).
#include <gtest/gtest.h>

#include <iterator>
#include <random>

#include "core/error.h"
#include "unit/gguf/gguf_bytes.h"
#include "io/gguf.h"

namespace kestrel {
namespace {

using test::GgufBytes;
using test::valid_gguf;

// Opens the bytes and expects an Error of `kind` whose message contains `needle`.
void expect_refused(const GgufBytes& b, const std::string& needle, ErrorKind kind = ErrorKind::kBadInput,
                    size_t n = std::string::npos) {
  const std::string path = b.save("malformed.gguf", n);
  try {
    GgufFile::open(path);
    FAIL() << "accepted a malformed file; expected an error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "message must name the file: " << e.what();
  }
}

TEST(GgufMalformed, BaselineIsValid) {
  const GgufFile f = GgufFile::open(valid_gguf().save("valid.gguf"));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.get_string("general.architecture"), "test");
  EXPECT_EQ(f.tensors()[0].shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(f.tensors()[0].nbytes, 68u);
  EXPECT_EQ(f.tensors()[1].data[4], 0x00);  // 1.0f = 00 00 80 3f
  EXPECT_EQ(f.tensors()[1].data[6], 0x80);
}

TEST(GgufMalformed, TruncatedAtEveryByte) {
  const GgufBytes b = valid_gguf();
  for (size_t n = 0; n < b.size(); ++n) {
    SCOPED_TRACE(n);
    expect_refused(b, "truncated", ErrorKind::kBadInput, n);
  }
}

TEST(GgufMalformed, BadMagic) {
  GgufBytes b;
  b.raw("GGML").u32(3).u64(0).u64(0);
  expect_refused(b, "not a GGUF file");
}

TEST(GgufMalformed, OldAndFutureVersions) {
  for (uint32_t v : {1u, 2u}) expect_refused(GgufBytes().header(0, 0, v), "version " + std::to_string(v), ErrorKind::kUnsupported);
  expect_refused(GgufBytes().header(0, 0, 4), "unknown GGUF version 4");
  expect_refused(GgufBytes().header(0, 0, 0x03000000u), "big-endian", ErrorKind::kUnsupported);
}

TEST(GgufMalformed, HugeTensorCount) {
  expect_refused(GgufBytes().header(uint64_t(1) << 63, 0), "9223372036854775808 tensors");
}

TEST(GgufMalformed, HugeKvCount) {
  expect_refused(GgufBytes().header(0, uint64_t(1) << 63), "9223372036854775808 metadata key/values");
}

TEST(GgufMalformed, KeyLengthPastEof) {
  GgufBytes b;
  b.header(0, 1).u64(1000).raw("general.x").u32(4).u32(0);
  expect_refused(b, "the key of metadata entry 0");
}

TEST(GgufMalformed, KeyTooLong) {
  GgufBytes b;
  b.header(0, 1).u64(70000).zeros(70000).u32(4).u32(0);
  expect_refused(b, "over the limit of 65535");
}

TEST(GgufMalformed, EmptyKey) {
  GgufBytes b;
  b.header(0, 1).kv_u32("", 1);
  expect_refused(b, "empty key");
}

TEST(GgufMalformed, StringValueLengthPastEof) {
  GgufBytes b;
  b.header(0, 1).str("general.name").u32(8).u64(uint64_t(1) << 40).raw("abc");
  expect_refused(b, "the value of key 'general.name'");
}

TEST(GgufMalformed, HugeArrayCount) {
  GgufBytes b;
  b.header(0, 1).str("tokenizer.ggml.scores").u32(9).u32(6).u64(uint64_t(1) << 62).f32(0);
  expect_refused(b, "tokenizer.ggml.scores' declares an array of 4611686018427387904");
  GgufBytes s;
  s.header(0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(uint64_t(1) << 62).str("a");
  expect_refused(s, "tokenizer.ggml.tokens' declares an array of 4611686018427387904");
}

TEST(GgufMalformed, UnknownValueType) {
  GgufBytes b;
  b.header(0, 1).str("general.x").u32(13).u32(0);
  expect_refused(b, "key 'general.x' has unknown value type 13");
  GgufBytes a;
  a.header(0, 1).str("general.y").u32(9).u32(77).u64(1).u32(0);
  expect_refused(a, "key 'general.y' has unknown array element type 77");
}

TEST(GgufMalformed, NestedArray) {
  GgufBytes b;
  b.header(0, 1).str("general.nested").u32(9).u32(9).u64(1).u32(4).u64(0);
  expect_refused(b, "array of arrays", ErrorKind::kUnsupported);
}

TEST(GgufMalformed, BoolNotZeroOrOne) {
  GgufBytes b;
  b.header(0, 1).str("general.flag").u32(7).u8(2);
  expect_refused(b, "key 'general.flag' is a bool with byte value 2");
}

TEST(GgufMalformed, DuplicateKeys) {
  GgufBytes b;
  b.header(0, 2).kv_u32("qwen3.block_count", 2).kv_u32("qwen3.block_count", 3);
  expect_refused(b, "duplicate metadata key 'qwen3.block_count'");
}

TEST(GgufMalformed, AlignmentNotPowerOfTwo) {
  GgufBytes b;
  b.header(0, 1).kv_u32("general.alignment", 48);
  expect_refused(b, "general.alignment 48 is not a power of two");
  GgufBytes z;
  z.header(0, 1).kv_u32("general.alignment", 0);
  expect_refused(z, "general.alignment 0 is not a power of two");
  GgufBytes t;
  t.header(0, 1).str("general.alignment").u32(10).u64(32);
  expect_refused(t, "general.alignment must be a u32");
}

GgufBytes one_tensor(const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset, size_t data_bytes,
                     std::string_view name = "blk.0.attn_q.weight") {
  GgufBytes b;
  b.header(1, 0).tensor(name, ne, type, offset).pad(32).zeros(data_bytes);
  return b;
}

TEST(GgufMalformed, UnknownGgmlType) {
  expect_refused(one_tensor({32}, 4, 0, 64), "has unknown ggml type id 4");  // Q4_2, removed
  expect_refused(one_tensor({32}, 1000, 0, 64), "has unknown ggml type id 1000");
}

TEST(GgufMalformed, BadDimensionCount) {
  expect_refused(one_tensor({}, 0, 0, 64), "has n_dims 0");
  expect_refused(one_tensor({1, 1, 1, 1, 1}, 0, 0, 64), "has n_dims 5");
}

TEST(GgufMalformed, ZeroDimension) {
  expect_refused(one_tensor({4, 0}, 0, 0, 64), "has dimension 1 equal to 0");
}

TEST(GgufMalformed, OverflowingShape) {
  expect_refused(one_tensor({uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0, 64), "product overflows");
  expect_refused(one_tensor({uint64_t(1) << 63}, 0, 0, 64), "absurdly large");
}

TEST(GgufMalformed, BlockFormatRowNotMultipleOfBlock) {
  expect_refused(one_tensor({100, 2}, 12, 0, 512), "is Q4_K (blocks of 256) but its first dimension 100");
  expect_refused(one_tensor({48}, 8, 0, 64), "is Q8_0 (blocks of 32) but its first dimension 48");
}

TEST(GgufMalformed, MisalignedOffset) {
  expect_refused(one_tensor({4}, 0, 8, 64), "data offset 8, not a multiple of the alignment 32");
}

TEST(GgufMalformed, OffsetPastEof) {
  expect_refused(one_tensor({4}, 0, 1 << 20, 64), "runs past the end of the data section");
  expect_refused(one_tensor({4}, 0, uint64_t(-32), 64), "runs past the end of the data section");
  expect_refused(one_tensor({64}, 0, 0, 200), "runs past the end of the data section");  // 256 bytes needed
}

TEST(GgufMalformed, OverlappingTensors) {
  GgufBytes b;
  b.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad(32).zeros(128);
  expect_refused(b, "tensor 'b' (data at 32) overlaps tensor 'a'");
}

TEST(GgufMalformed, DuplicateTensorNames) {
  GgufBytes b;
  b.header(2, 0).tensor("w", {4}, 0, 0).tensor("w", {4}, 0, 32).pad(32).zeros(64);
  expect_refused(b, "duplicate tensor name 'w'");
}

TEST(GgufMalformed, BadTensorNames) {
  expect_refused(one_tensor({4}, 0, 0, 64, std::string(64, 'x')), "over the limit of 63");
  expect_refused(one_tensor({4}, 0, 0, 64, ""), "empty name");
}

TEST(GgufMalformed, EmptyFile) {
  expect_refused(GgufBytes(), "truncated file: the magic");
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

// Random corruption of a valid file (byte flips, and 8-byte fields overwritten with extreme
// values): every variant either opens or is refused with an Error; nothing crashes or reads out
// of bounds (checked under the sanitizer build by scripts/test.sh).
TEST(GgufMalformed, RandomCorruptionsAreRefusedCleanly) {
  const std::string base = test::valid_gguf().bytes();
  std::mt19937 rng(42);
  const uint64_t extremes[] = {0, 1, 31, 32, 33, 255, 65535, uint64_t(1) << 31, uint64_t(1) << 32,
                               uint64_t(1) << 62, uint64_t(1) << 63, ~uint64_t(0), ~uint64_t(0) - 31};
  int opened = 0, refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes = base;
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % bytes.size();
      if (rng() % 2) {
        bytes[at] = char(bytes[at] ^ char(1 << (rng() % 8)));
      } else {
        const uint64_t v = extremes[rng() % std::size(extremes)];
        for (size_t k = 0; k < 8 && at + k < bytes.size(); ++k) bytes[at + k] = char((v >> (8 * k)) & 0xff);
      }
    }
    test::GgufBytes b;
    b.raw(bytes);
    const std::string path = b.save("corrupt.gguf");
    try {
      const GgufFile f = GgufFile::open(path);
      uint64_t sum = 0;  // touch every byte the file claims (out-of-bounds would trip ASan)
      for (const GgufTensor& t : f.tensors())
        for (uint64_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
      for (const auto& kv : f.metadata()) sum += kv.second.summary().size();
      EXPECT_GE(sum, 0u);
      ++opened;
    } catch (const Error& e) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 500);
  EXPECT_GT(opened, 10);  // flips inside tensor data or string contents keep the file valid
}

}  // namespace
}  // namespace kestrel

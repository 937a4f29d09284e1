// Gemma 4 against what transformers computed (tests/data/fixtures/gemma4_text*), and the
// chunking and batching invariants on prompts longer than the sliding window (16).
#include "golden/model_invariants.h"

namespace kestrel::test {
namespace {

TEST(Gemma4Golden, Text) { expect_parity("gemma4_text"); }
TEST(Gemma4Golden, Moe) { expect_parity("gemma4_text_moe"); }
TEST(Gemma4Golden, KvShared) { expect_parity("gemma4_text_kvshared"); }
TEST(Gemma4Golden, KEqV) { expect_parity("gemma4_text_keqv"); }

TEST(Gemma4Golden, ChunkedPrefillMatchesOnePass) {
  expect_chunking_invariant("gemma4_text", 100);
  expect_chunking_invariant("gemma4_text_kvshared", 100);
}
TEST(Gemma4Golden, ChunkedPrefillMatchesOnePassMoeKEqV) {
  expect_chunking_invariant("gemma4_text_moe", 70);
  expect_chunking_invariant("gemma4_text_keqv", 70);
}

TEST(Gemma4Golden, BatchedDecodeIsBitIdentical) {
  for (const char* f : {"gemma4_text", "gemma4_text_moe", "gemma4_text_kvshared", "gemma4_text_keqv"})
    expect_batching_invariant(f);
}

}  // namespace
}  // namespace kestrel::test

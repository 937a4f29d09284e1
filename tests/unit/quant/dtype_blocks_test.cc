// The engine's block dtypes (DType::kQ8_0 ...) agree with ggml's block layouts, and tensors of
// them size and slice by whole rows of blocks.
#include <gtest/gtest.h>

#include "ops/tensor.h"
#include "quant/ggml_type.h"
#include "quant/quant.h"

namespace kestrel {
namespace {

constexpr DType kBlockDTypes[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ5_1, DType::kQ4_K,
                                  DType::kQ5_K, DType::kQ6_K, DType::kMXFP4};

TEST(DTypeBlocks, MatchGgmlTraitsBothWays) {
  for (DType d : kBlockDTypes) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    EXPECT_TRUE(dtype_is_quantized(d));
    EXPECT_EQ(dtype_size(d), 0u);
    auto g = dtype_to_ggml(d);
    ASSERT_TRUE(g.has_value());
    EXPECT_TRUE(quant::has_kernels(*g));
    EXPECT_EQ(ggml_type_name(*g), dtype_name(d));
    EXPECT_EQ(ggml_block_size(*g), dtype_block_elems(d));
    EXPECT_EQ(uint64_t(ggml_type_size(*g)), dtype_block_bytes(d));
    EXPECT_EQ(ggml_row_bytes(*g, 4096), dtype_row_bytes(d, 4096));
    auto back = ggml_to_dtype(*g);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, d);
    DType parsed;
    EXPECT_FALSE(dtype_from_name(dtype_name(d), &parsed)) << "block formats are not safetensors dtypes";
  }
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    EXPECT_FALSE(dtype_is_quantized(d));
    EXPECT_EQ(dtype_block_elems(d), 1);
    EXPECT_EQ(dtype_row_bytes(d, 10), 10 * dtype_size(d));
  }
}

TEST(DTypeBlocks, TensorRowsAreWholeBlocks) {
  Buffer b = host_buffer(DType::kQ4_K, 3, 512);
  const Tensor& t = b.view();
  EXPECT_EQ(t.row_bytes(), 2u * 144u);
  EXPECT_EQ(t.nbytes(), 3u * 2u * 144u);
  Tensor r = t.rows_slice(2, 1);
  EXPECT_EQ(static_cast<uint8_t*>(r.data) - static_cast<uint8_t*>(t.data), 2 * 2 * 144);
  EXPECT_EQ(r.nbytes(), 288u);
}

}  // namespace
}  // namespace kestrel

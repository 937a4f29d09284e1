// The ggml tensor types a GGUF file can name, with their block layouts.
//
// The numeric ids are ggml's (`enum ggml_type`, append-only; 4, 5, 31-33 and 36-38 were removed
// from the format and are refused). A row of `n` elements of a block type holds n / block_size
// blocks of type_size bytes each; n must be a multiple of block_size. Plain types have
// block_size 1. Only some types have kestrel kernels (see quant/quant.h: has_kernels()); the
// others are still *known* so a reader can report "Q3_K is not supported" instead of garbage.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace kestrel {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;  // ggml's spelling: "Q4_K", "BF16", ...
  int64_t block_size;     // elements per block (1 for plain types)
  int64_t type_size;      // bytes per block
};

// Traits of a known type id, or nullopt for ids ggml never had or removed.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id);
const GgmlTypeTraits& ggml_traits(GgmlType type);  // KCHECKs the type is known
std::string_view ggml_type_name(GgmlType type);
// Parses "q8_0", "Q4_K", "bf16" (case-insensitive); false if unknown.
bool ggml_type_from_name(std::string_view name, GgmlType* out);

inline int64_t ggml_block_size(GgmlType t) { return ggml_traits(t).block_size; }
inline int64_t ggml_type_size(GgmlType t) { return ggml_traits(t).type_size; }
inline bool ggml_is_block_format(GgmlType t) { return ggml_block_size(t) > 1; }
// Bytes of one row of n elements; KCHECKs n % block_size == 0.
uint64_t ggml_row_bytes(GgmlType t, int64_t n);

// The engine dtype a ggml type corresponds to (F32, F16, BF16, I8, ..., and the block formats
// kestrel has kernels for: Q8_0, Q4_K, ...; see dtype_is_quantized), if any.
std::optional<DType> ggml_to_dtype(GgmlType t);
std::optional<GgmlType> dtype_to_ggml(DType d);

}  // namespace kestrel

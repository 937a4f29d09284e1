#include "quant/ggml_type.h"

#include <cctype>
#include <string>

#include "core/error.h"

namespace kestrel {
namespace {

// Block sizes and bytes per block from ggml's block structs (ggml-common.h).
constexpr GgmlTypeTraits kTraits[] = {
    {GgmlType::kF32, "F32", 1, 4},          {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},      {GgmlType::kQ4_1, "Q4_1", 32, 20},
    {GgmlType::kQ5_0, "Q5_0", 32, 22},      {GgmlType::kQ5_1, "Q5_1", 32, 24},
    {GgmlType::kQ8_0, "Q8_0", 32, 34},      {GgmlType::kQ8_1, "Q8_1", 32, 36},
    {GgmlType::kQ2_K, "Q2_K", 256, 84},     {GgmlType::kQ3_K, "Q3_K", 256, 110},
    {GgmlType::kQ4_K, "Q4_K", 256, 144},    {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210},    {GgmlType::kQ8_K, "Q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66}, {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98}, {GgmlType::kIQ1_S, "IQ1_S", 256, 50},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18},  {GgmlType::kIQ3_S, "IQ3_S", 256, 110},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82},   {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::kI8, "I8", 1, 1},            {GgmlType::kI16, "I16", 1, 2},
    {GgmlType::kI32, "I32", 1, 4},          {GgmlType::kI64, "I64", 1, 8},
    {GgmlType::kF64, "F64", 1, 8},          {GgmlType::kIQ1_M, "IQ1_M", 256, 56},
    {GgmlType::kBF16, "BF16", 1, 2},        {GgmlType::kTQ1_0, "TQ1_0", 256, 54},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66},   {GgmlType::kMXFP4, "MXFP4", 32, 17},
};

struct DTypePair {
  GgmlType ggml;
  DType dtype;
};
constexpr DTypePair kDTypes[] = {
    {GgmlType::kF32, DType::kF32}, {GgmlType::kF16, DType::kF16}, {GgmlType::kBF16, DType::kBF16},
    {GgmlType::kI8, DType::kI8},   {GgmlType::kI16, DType::kI16}, {GgmlType::kI32, DType::kI32},
    {GgmlType::kI64, DType::kI64}, {GgmlType::kF64, DType::kF64},
    {GgmlType::kQ8_0, DType::kQ8_0}, {GgmlType::kQ5_0, DType::kQ5_0}, {GgmlType::kQ5_1, DType::kQ5_1},
    {GgmlType::kQ4_K, DType::kQ4_K}, {GgmlType::kQ5_K, DType::kQ5_K}, {GgmlType::kQ6_K, DType::kQ6_K},
    {GgmlType::kMXFP4, DType::kMXFP4},
};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
  for (const auto& t : kTraits)
    if (uint32_t(t.type) == id) return t;
  return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType type) {
  for (const auto& t : kTraits)
    if (t.type == type) return t;
  KCHECK_MSG(false, "unknown ggml type id ", uint32_t(type));
  __builtin_unreachable();
}

std::string_view ggml_type_name(GgmlType type) { return ggml_traits(type).name; }

bool ggml_type_from_name(std::string_view name, GgmlType* out) {
  std::string upper(name);
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& t : kTraits) {
    if (t.name == upper) {
      *out = t.type;
      return true;
    }
  }
  return false;
}

uint64_t ggml_row_bytes(GgmlType t, int64_t n) {
  const GgmlTypeTraits& tr = ggml_traits(t);
  KCHECK_MSG(n >= 0 && n % tr.block_size == 0, tr.name, " row of ", n, " elements is not a whole number of ",
             tr.block_size, "-element blocks");
  return uint64_t(n / tr.block_size) * uint64_t(tr.type_size);
}

std::optional<DType> ggml_to_dtype(GgmlType t) {
  for (const auto& p : kDTypes)
    if (p.ggml == t) return p.dtype;
  return std::nullopt;
}

std::optional<GgmlType> dtype_to_ggml(DType d) {
  for (const auto& p : kDTypes)
    if (p.dtype == d) return p.ggml;
  return std::nullopt;
}

}  // namespace kestrel

// kestrel gguf-info: what a GGUF file holds. kestrel quantize: re-store a GGUF's float matrices
// in a block format with kestrel's reference quantizers (llama-quantize --pure without an
// importance matrix), streaming one row at a time.
#include <cstdio>
#include <optional>
#include <vector>

#include "cli/command.h"
#include "convert/quant_recipe.h"
#include "core/error.h"
#include "core/progress.h"
#include "io/gguf.h"
#include "quant/quant.h"

namespace kestrel::cli {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int run_info(const Args& args) {
  if (args.positional().size() != 1) bad_input("usage: kestrel gguf-info FILE.gguf");
  const GgufFile f = GgufFile::open(args.positional()[0]);
  std::printf("GGUF v%u, alignment %u, %zu metadata keys, %zu tensors, data at byte %llu\n", f.version(),
              f.alignment(), f.metadata().size(), f.tensors().size(), (unsigned long long)f.data_offset());
  for (const auto& [key, value] : f.metadata()) std::printf("  %-48s %s\n", key.c_str(), value.summary().c_str());
  uint64_t total = 0;
  for (const GgufTensor& t : f.tensors()) {
    std::printf("  %-48s %-6s %-22s %s\n", t.name.c_str(), std::string(ggml_type_name(t.type)).c_str(),
                shape_str(t.shape).c_str(), human_bytes(double(t.nbytes)).c_str());
    total += t.nbytes;
  }
  std::printf("tensor data: %s\n", human_bytes(double(total)).c_str());
  return 0;
}

bool is_float(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

// llama.cpp's general.file_type for a file whose matrices are all `t` (the K-quants map to the
// closest llama.cpp recipe, whose name the file then carries: Q4_K -> Q4_K_S, Q5_K -> Q5_K_S).
uint32_t file_type_code(GgmlType t) {
  switch (t) {
    case GgmlType::kF32: return 0;
    case GgmlType::kF16: return 1;
    case GgmlType::kQ8_0: return 7;
    case GgmlType::kQ5_0: return 8;
    case GgmlType::kQ5_1: return 9;
    case GgmlType::kQ4_K: return 14;
    case GgmlType::kQ5_K: return 16;
    case GgmlType::kQ6_K: return 18;
    case GgmlType::kBF16: return 32;
    case GgmlType::kMXFP4: return 38;
    default: return 0;
  }
}

int run_quantize(const Args& args) {
  const std::string in_path = args.require("input"), out_path = args.require("output");
  GgmlType target = GgmlType::kQ4_K;
  const std::string type_name = args.get("type", ""), recipe_name = args.get("recipe", "");
  if (type_name.empty() == recipe_name.empty()) bad_input("quantize takes one of --type and --recipe");
  std::optional<QuantRecipe> recipe;
  if (!recipe_name.empty()) {
    recipe = quant_recipe_from_name(recipe_name);
    if (!recipe) unsupported("--recipe ", recipe_name, ": kestrel's recipes are q4_k_m, q4_k_s, q5_k_m and q6_k");
  } else if (!ggml_type_from_name(type_name, &target) || !quant::has_kernels(target)) {
    unsupported("--type ", type_name, ": kestrel quantizes to f32, f16, bf16, q8_0, q5_0, q5_1, q4_k, q5_k, q6_k or mxfp4");
  }
  if (in_path == out_path) bad_input("--output must differ from --input (the input is read while writing)");
  const GgufFile in = GgufFile::open(in_path);
  GgufWriter out(out_path, in.alignment());
  for (const auto& [key, value] : in.metadata())
    if (key != "general.alignment") out.set(key, value);
  if (in.find("general.file_type"))
    out.set("general.file_type", GgufValue::u32(recipe ? quant_recipe_file_type(*recipe) : file_type_code(target)));
  // What llama-quantize quantizes (matrices, not norms, routers, conv kernels, ...) and whose rows
  // split into whole blocks is re-stored, in one type or by the recipe; everything else is copied as
  // it is. Block-format inputs are dequantized to a float target, and re-quantized to another block
  // format only on request.
  const bool requantize = args.flag("allow-requantize");
  std::vector<GgmlType> wanted;
  if (recipe) {
    std::vector<RecipeTensor> rt;
    for (const GgufTensor& t : in.tensors()) rt.push_back({t.name, t.shape, t.type});
    const std::string arch = in.find("general.architecture") ? in.get_string("general.architecture") : "";
    const int64_t experts = in.find(arch + ".expert_count") ? in.get_int(arch + ".expert_count") : 0;
    wanted = quant_recipe_types(*recipe, rt, int(experts), int(in.get_int(arch + ".block_count")));
  } else {
    for (const GgufTensor& t : in.tensors())
      wanted.push_back(llama_quantizes(t.name, t.shape) && t.row_length() % ggml_block_size(target) == 0 ? target : t.type);
  }
  std::vector<GgmlType> types;
  uint64_t total = 0;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const GgufTensor& t = in.tensors()[i];
    GgmlType type = wanted[i];
    KCHECK_MSG(type == t.type || quant::has_kernels(type), t.name, ": ", ggml_type_name(type));
    const bool source_ok = is_float(t.type) || (quant::has_kernels(t.type) && (is_float(type) || requantize));
    if (!source_ok) type = t.type;
    types.push_back(type);
    out.declare(t.name, type, t.shape);
    total += t.nbytes;
  }
  out.begin();
  Progress progress("quantize", total, true);
  std::vector<float> row;
  std::vector<uint8_t> packed;
  for (size_t i = 0; i < in.tensors().size(); ++i) {
    const GgufTensor& t = in.tensors()[i];
    if (types[i] == t.type) {
      out.write_tensor(t.name, t.data, t.nbytes);
    } else {
      const int64_t n = t.row_length(), rows = t.numel() / n;
      const uint64_t in_row = ggml_row_bytes(t.type, n);
      row.resize(size_t(n));
      packed.resize(ggml_row_bytes(types[i], n));
      out.start_tensor(t.name);
      for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(t.type, t.data + uint64_t(r) * in_row, n, row.data());
        quant::quantize_row(types[i], row.data(), n, packed.data());
        out.append(packed.data(), packed.size());
      }
      out.end_tensor();
    }
    progress.advance(t.nbytes);
  }
  out.finish();
  progress.finish();
  return 0;
}

const Registrar kInfo{{
    .name = "gguf-info",
    .summary = "list the metadata and tensors of a GGUF file",
    .usage = "kestrel gguf-info FILE.gguf",
    .details = "Validates the file as the loader does and prints every metadata key and tensor.",
    .options = {},
    .run = run_info,
}};

const Registrar kQuantize{{
    .name = "quantize",
    .summary = "re-store the float matrices of a GGUF file in a block format",
    .usage = "kestrel quantize -i IN.gguf -o OUT.gguf --type q8_0|q5_0|q5_1|q4_k|q5_k|q6_k|mxfp4|bf16|f16|f32\n"
             "       kestrel quantize -i IN.gguf -o OUT.gguf --recipe q4_k_m|q4_k_s|q5_k_m|q6_k",
    .details = "Every F32/F16/BF16 tensor llama-quantize would quantize (2+ dimensions; not norms, MoE routers,\n"
               "conv1d kernels, Gemma's per_layer_model_proj) whose rows are whole blocks is quantized with\n"
               "kestrel's reference quantizers (the same bytes as llama.cpp's reference quantizers, like\n"
               "llama-quantize --pure without an importance matrix); other tensors are copied unchanged.\n"
               "--recipe instead gives each tensor the type llama-quantize (no importance matrix) gives it for\n"
               "that llama.cpp file type (docs/gguf.md). general.file_type follows the type or recipe.\n"
               "Tensors in a block format are dequantized when TYPE is f32/f16/bf16 (and re-quantized to\n"
               "another block format only with --allow-requantize). Streams one row at a time; the output\n"
               "is written to a temporary name and renamed.",
    .options = {{"input", "i", "IN", "input GGUF file"},
                {"output", "o", "OUT", "output GGUF file"},
                {"type", "", "TYPE", "one target type for every quantized tensor"},
                {"recipe", "", "NAME", "llama.cpp's mixed file type: q4_k_m, q4_k_s, q5_k_m or q6_k"},
                {"allow-requantize", "", "", "also re-quantize tensors already in a block format", ""}},
    .run = run_quantize,
}};

}  // namespace
}  // namespace kestrel::cli

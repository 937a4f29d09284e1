// kestrel convert: a Hugging Face checkpoint -> a GGUF file llama.cpp can load.
#include <chrono>
#include <cstdio>

#include "cli/command.h"
#include "convert/hf_to_gguf.h"
#include "core/error.h"
#include "core/progress.h"

namespace kestrel::cli {
namespace {

int run_convert(const Args& args) {
  ConvertOptions opts;
  opts.model_dir = args.require("model");
  opts.output = args.require("output");
  const std::string quant = args.get("quant", "bf16");
  if (auto recipe = quant_recipe_from_name(quant)) {
    opts.recipe = recipe;
  } else {
    if (!ggml_type_from_name(quant, &opts.type))
      unsupported("--quant ", quant, ": kestrel convert writes bf16, f16, f32, q8_0, q4_k_m, q4_k_s, q5_k_m or q6_k");
    llama_file_type(opts.type);  // refuses the types convert does not write yet, by name
  }
  opts.tokenizer = !args.flag("no-tokenizer");
  const auto start = std::chrono::steady_clock::now();
  const ConvertReport r = convert_hf_to_gguf(opts);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "%s: %llu tensors, %s read, %s written in %.1f s (arch %s%s)\n", opts.output.c_str(),
               (unsigned long long)r.n_tensors, human_bytes(double(r.bytes_in)).c_str(),
               human_bytes(double(r.bytes_out)).c_str(), seconds, r.arch.c_str(),
               r.n_fallback ? (", " + std::to_string(r.n_fallback) + " matrices kept in BF16: rows not whole blocks").c_str()
                            : "");
  if (opts.recipe) {
    std::string types;
    for (const auto& [t, n] : r.tensors_by_type)
      types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(ggml_type_name(t));
    std::fprintf(stderr, "%s: %s\n", quant_recipe_name(*opts.recipe), types.c_str());
  }
  if (!r.has_tokenizer && opts.tokenizer)
    std::fprintf(stderr, "note: %s has no tokenizer.json; the GGUF carries no tokenizer\n", opts.model_dir.c_str());
  return 0;
}

const Registrar kReg{{
    .name = "convert",
    .summary = "convert a Hugging Face checkpoint to GGUF (llama.cpp names and metadata)",
    .usage = "kestrel convert -m HF_DIR -o FILE.gguf [--quant bf16|f16|f32|q8_0|q4_k_m|q4_k_s|q5_k_m|q6_k]\n"
             "                       [--no-tokenizer]",
    .details = "Families (llama.cpp arch): qwen3 (qwen3), qwen3_moe (qwen3moe), qwen3_next (qwen3next),\n"
               "qwen3_5 (qwen35), qwen3_5_moe (qwen35moe), gemma4 / gemma4_text (gemma4), with llama.cpp's tensor\n"
               "names, metadata and transforms: zero-centred norms stored as 1 + w, A_log as ssm_a = -exp(A_log),\n"
               "Qwen3-Next's in_proj_qkvz split into attn_qkv + attn_gate, Qwen3.5's value heads in tiled order\n"
               "(docs/gguf.md). qwen4_exp has no llama.cpp architecture and is refused. Norms, 1-D tensors, MoE\n"
               "routers and conv1d kernels stay F32; matrices whose rows are not whole blocks of the chosen type\n"
               "stay BF16. tokenizer.json becomes tokenizer.ggml.* metadata (byte-level BPE as 'gpt2', Gemma's as\n"
               "'gemma4'). q4_k_m, q4_k_s, q5_k_m and q6_k are llama.cpp's mixed recipes: each tensor gets the\n"
               "type llama-quantize (no importance matrix) would give it, e.g. Q6_K for the output head and on\n"
               "some layers' attn_v / ffn_down (docs/gguf.md);\n"
               "rows that are not whole 256-blocks take llama.cpp's fallbacks (Q5_0, Q5_1, Q8_0, F16).\n"
               "Streams the rows in 64 MiB chunks, each quantized on all cores; written to a temporary name and renamed.",
    .options = {{"model", "m", "DIR", "Hugging Face model directory (config.json + safetensors)"},
                {"output", "o", "FILE", "output GGUF file"},
                {"quant", "", "TYPE", "bf16, f16, f32, q8_0, or a recipe: q4_k_m, q4_k_s, q5_k_m, q6_k", "bf16"},
                {"no-tokenizer", "", "", "write the weights and model metadata only, without tokenizer.ggml.*"}},
    .run = run_convert,
}};

}  // namespace
}  // namespace kestrel::cli

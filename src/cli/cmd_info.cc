// kestrel info: what a checkpoint directory (or GGUF file) holds and how much memory running it takes.
#include <cstdio>

#include "cli/backend_select.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/progress.h"
#include "model/model_info.h"

namespace kestrel::cli {
namespace {

void print_text(const ModelInfo& info) {
  const ModelConfig& c = info.config;
  auto row = [](const char* key, const std::string& value) { std::printf("%-16s %s\n", key, value.c_str()); };
  row("model", info.dir);
  row("architecture", info.architecture.empty() ? "(not given)" : info.architecture);
  row("model_type", c.model_type + (info.text_model_type.empty() ? "" : " (text: " + info.text_model_type + ")"));
  row("layers", std::to_string(c.n_layers) + ": " + info.layer_pattern);
  row("hidden", cat(c.hidden_size, ", vocab ", c.vocab_size, ", context ", c.max_positions,
                    c.tie_embeddings ? ", tied embeddings" : ""));
  const int n_attn = c.count_layers(LayerKind::kFullAttention) + c.count_layers(LayerKind::kSlidingAttention);
  if (n_attn > 0) {
    row("attention", cat(c.attn.n_heads, " heads / ", c.attn.n_kv_heads, " KV heads x ", c.attn.head_dim,
                         c.attn.output_gate ? ", gated output" : "", ", rotary ", c.attn.rope.rotary_dim,
                         " dims, theta ", c.attn.rope.theta));
  }
  if (c.count_layers(LayerKind::kLinearAttention) > 0) {
    const auto& g = c.gdn;
    row("gated deltanet", cat(g.n_k_heads, " key heads x ", g.k_head_dim, ", ", g.n_v_heads, " value heads x ",
                              g.v_head_dim, ", conv ", g.conv_kernel,
                              g.tiled_value_heads ? ", value heads in the GGUF's tiled order" : ""));
  }
  int moe_layers = 0;
  for (bool m : c.layer_moe) moe_layers += m;
  const char* glu = c.arch == "gemma4" ? "GeGLU " : "SwiGLU ";
  if (c.arch == "gemma4") row("mlp", cat(glu, c.ffn_size, " on ", c.n_layers, " layers"));  // MoE sits beside it
  else if (moe_layers < c.n_layers) row("mlp", cat(glu, c.ffn_size, " on ", c.n_layers - moe_layers, " layers"));
  if (moe_layers > 0) {
    row("experts", cat(c.moe.n_experts, " (top-", c.moe.top_k, ", ffn ", c.moe.expert_ffn,
                       c.moe.shared_ffn ? cat(", shared ", c.moe.shared_ffn) : std::string(), ") on ", moe_layers,
                       " layers"));
  }
  row("parameters", cat(human_count(double(info.n_params)), " (", info.n_params, ", text weights)"));
  if (info.n_other_tensors > 0)
    row("not used", cat(info.n_other_tensors, " tensors, ", human_count(double(info.other_params)),
                        " parameters (vision tower, MTP, ...)"));
  row("weights", cat(human_bytes(double(info.weight_bytes)), " (", info.weight_dtypes, ")"));
  // layers that own paged KV blocks, and those whose K/V live in a per-sequence ring
  int paged = 0, rings = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    if (!c.is_attention(l) || c.kv_source(l) != l) continue;
    (c.window_for(l) > 0 ? rings : paged) += 1;
  }
  const char* kv_dtype = info.plan.kv_bf16 ? "BF16" : "F32";
  row("kv cache", cat(human_bytes(double(info.kv_bytes_per_token)), " per token (", paged,
                      paged == 1 ? " attention layer, " : " attention layers, ", kv_dtype, ")"));
  if (info.state_bytes_per_seq > 0) {
    std::string parts;
    const int n_lin = c.count_layers(LayerKind::kLinearAttention);
    if (n_lin > 0) parts = cat(n_lin, " linear-attention layers, F32");
    if (rings > 0) parts += cat(parts.empty() ? "" : "; ", rings, " sliding-window rings, ", kv_dtype);
    row("state", cat(human_bytes(double(info.state_bytes_per_seq)), " per sequence (", parts, ")"));
  }
  row("memory", cat(human_bytes(double(info.total_bytes)), " for ", info.plan.seqs, " x ", info.plan.ctx,
                    " tokens: weights ", human_bytes(double(info.weight_bytes)), " + KV ",
                    human_bytes(double(info.kv_bytes)), " + state ", human_bytes(double(info.state_bytes)),
                    " (activations not included)"));
  if (info.plan.ctx > c.max_positions)
    row("warning", cat("--ctx ", info.plan.ctx, " is beyond the model's context of ", c.max_positions, " tokens"));
}

int run_info(const Args& args) {
  MemoryPlanParams plan{
      .ctx = args.get_int("ctx", 4096, 1, int64_t(1) << 24),
      .seqs = int32_t(args.get_int("seqs", 1, 1, 1 << 20)),
  };
  plan.kv_bf16 = kv_cache_bf16(args.get("kv-cache", "f32"));
  ModelInfo info = model_info(args.require("model"), plan);
  if (args.flag("json")) {
    std::printf("%s\n", model_info_json(info).dump(1).c_str());
  } else {
    print_text(info);
  }
  return 0;
}

const Registrar kReg{{
    .name = "info",
    .summary = "show a model's architecture, parameter count and memory needs",
    .usage = "kestrel info -m DIR|FILE.gguf [--ctx N] [--seqs N] [--kv-cache f32|bf16] [--json]",
    .details = "Reads config.json and the safetensors headers, or a GGUF file's metadata and tensor table (no\n"
               "weights are loaded): architecture, layer pattern, shapes, parameter count of the text weights\n"
               "and their stored bytes (block formats at their quantized size), KV-cache bytes per token,\n"
               "recurrent state per sequence, and the memory for --seqs sequences of --ctx tokens.",
    .options = {{"model", "m", "DIR", "model directory (config.json + safetensors) or GGUF file", ""},
                {"ctx", "", "N", "context length for the memory plan", "4096"},
                {"seqs", "", "N", "sequences live at once for the memory plan", "1"},
                {"kv-cache", "", "f32|bf16", "the KV cache's dtype for the memory plan (as kestrel run/serve --kv-cache)", "f32"},
                {"json", "", "", "print one JSON object", ""}},
    .run = run_info,
}};

}  // namespace
}  // namespace kestrel::cli

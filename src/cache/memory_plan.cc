#include "cache/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/progress.h"
#include "ops/attention_prefill_limits.h"

namespace kestrel {

MemoryLimit parse_memory_limit(const std::string& text, const std::string& flag) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s, &end);
  if (end == s || errno != 0 || !std::isfinite(v) || v <= 0)
    bad_input(flag, " '", text, "': expected a fraction of the device in (0, 1] or a size such as 60G");
  std::string unit(end);
  for (char& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (unit.empty() && text.find('.') != std::string::npos) {
    if (v > 1.0) bad_input(flag, " '", text, "': a fraction must be in (0, 1]");
    return {.fraction = v};
  }
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else bad_input(flag, " '", text, "': unknown unit '", end, "' (K, M, G, T, KiB.. or KB..)");
  const double bytes = v * scale;
  if (bytes < 1.0 || bytes > 1e18) bad_input(flag, " '", text, "' is out of range");
  if (unit.empty() && v <= 1.0) return {.fraction = v};  // "1": the whole device
  return {.bytes = uint64_t(bytes)};
}

uint64_t prefill_attention_scratch(const ModelConfig& cfg, int64_t rows, int64_t max_context, int64_t n_seqs) {
  using namespace attention_prefill;
  if (rows < kMinRows || max_context <= 0) return 0;
  // the widest attention layer's K (or V) row, a row's partial results (O, max, sum per head) and
  // query heads
  int64_t kv_width = 0, part_floats = 0, heads = 0;
  for (int l = 0; l < cfg.n_layers; ++l) {
    if (!cfg.is_attention(l)) continue;
    const auto& a = cfg.attn_for(l);
    kv_width = std::max<int64_t>(kv_width, int64_t(a.n_kv_heads) * a.head_dim);
    part_floats = std::max<int64_t>(part_floats, int64_t(a.n_heads) * (a.head_dim + 2));
    heads = std::max<int64_t>(heads, a.n_heads);
  }
  if (kv_width == 0) return 0;
  const uint64_t per_key = 2 * 2 * uint64_t(kv_width) * 2;  // hi and lo terms of K and V, BF16
  const uint64_t one_seq = per_key * uint64_t(max_context);
  const uint64_t copy = std::max(one_seq, std::min<uint64_t>(kCopyBudget, one_seq * uint64_t(std::max<int64_t>(n_seqs, 1))));
  const uint64_t slot = uint64_t(rows) * uint64_t(part_floats) * 4;  // one segment's partials for every row
  const uint64_t slots = uint64_t(max_context / kSegKeys + 2);
  const uint64_t fold_state = uint64_t(rows) * uint64_t(heads) * 2 * 4;  // when the fold spans launches
  return copy + std::max(slot, std::min<uint64_t>(kPartialBudget, slot * slots)) + fold_state;
}

uint64_t activation_reserve(const ModelConfig& cfg, int64_t rows, int64_t logit_rows, int64_t max_context,
                            int64_t n_seqs) {
  // Per row: the residual stream and its normed copy, attention q/k/v/gate/output, the MLP or
  // the routed experts' hidden rows (top-k of them), the DeltaNet projections; x2 for the
  // matmul's split terms and partial products; plus the CUDA prefill path's dequantized weight
  // tile for block-format weights (BF16 hi and lo, 128 MiB). Generous on purpose: a step that
  // runs out of device memory fails.
  const int64_t H = cfg.hidden_size;
  int64_t widest = std::max<int64_t>(cfg.ffn_size, 1);
  for (int l = 0; l < cfg.n_layers; ++l) {
    widest = std::max(widest, cfg.ffn_for(l));
    const auto& a = cfg.attn_for(l);
    widest = std::max<int64_t>(widest, 2 * int64_t(a.n_heads) * a.head_dim);
  }
  if (cfg.count_layers(LayerKind::kLinearAttention) > 0) widest = std::max<int64_t>(widest, cfg.gdn.conv_dim());
  if (cfg.has_moe()) widest = std::max<int64_t>(widest, int64_t(cfg.moe.top_k) * cfg.moe.expert_ffn + int64_t(cfg.moe.top_k) * H);
  const uint64_t per_row = uint64_t(4) * uint64_t(16 * H + 8 * widest);
  const uint64_t logits = uint64_t(logit_rows) * uint64_t(cfg.vocab_size) * 4;
  const uint64_t dequant_tile = uint64_t(128) << 20;
  return std::max<uint64_t>(uint64_t(512) << 20, uint64_t(rows) * per_row * 2 + logits + dequant_tile) +
         prefill_attention_scratch(cfg, rows, max_context, n_seqs);
}

std::string CachePlan::summary() const {
  const int64_t tokens = int64_t(sizing.n_blocks) * sizing.block_size;
  return cat(human_bytes(double(kv_bytes)), " for ", sizing.n_blocks, " KV blocks (", tokens, " tokens), ",
             human_bytes(double(state_bytes)), " for ", sizing.n_slots, " state slots; ", human_bytes(double(in_use)),
             " in use after loading, ", human_bytes(double(reserve)), " kept for activations, limit ",
             human_bytes(double(limit)));
}

CachePlan plan_cache(const ModelConfig& cfg, const CachePlanRequest& r) {
  KCHECK(r.block_size > 0 && r.device_free <= r.device_total);
  CachePlan p;
  p.sizing.block_size = r.block_size;
  p.sizing.n_slots = r.n_slots;
  p.limit = r.limit.fraction > 0 ? uint64_t(double(r.device_total) * r.limit.fraction) : r.limit.bytes;
  p.in_use = r.device_total - r.device_free;
  p.reserve = activation_reserve(cfg, std::max(r.max_step_tokens, 1), std::max(r.max_logit_rows, 1), r.max_context,
                                 std::max(r.n_slots, 1));
  const CacheCosts costs = cache_costs(cfg, r.block_size, r.kv_elem_bytes);
  p.state_bytes = uint64_t(r.n_slots) * costs.bytes_per_slot;
  const std::string limit_text = cat("--gpu-memory allows ", human_bytes(double(p.limit)), " of the device's ",
                                     human_bytes(double(r.device_total)));
  if (p.limit > r.device_total)
    bad_input(limit_text, ": more than the device has");
  const uint64_t needed = p.in_use + p.reserve + p.state_bytes;
  if (needed >= p.limit)
    bad_input(limit_text, "; ", human_bytes(double(p.in_use)), " are in use after loading the model, ",
              human_bytes(double(p.reserve)), " are kept for activations and ", human_bytes(double(p.state_bytes)),
              " are needed for ", r.n_slots, " state slots: no room for the KV cache (raise --gpu-memory, or lower "
              "--max-running, --step-tokens or --ctx)");
  const uint64_t room = std::min<uint64_t>(p.limit - needed, r.device_free > p.reserve + p.state_bytes
                                                                  ? r.device_free - p.reserve - p.state_bytes
                                                                  : 0);
  const int64_t need_blocks = (r.max_context + r.block_size - 1) / r.block_size;
  int64_t blocks = costs.bytes_per_block > 0 ? int64_t(room / costs.bytes_per_block) : need_blocks;
  blocks = std::min<int64_t>(blocks, INT32_MAX);
  if (costs.bytes_per_block > 0 && blocks < need_blocks)
    bad_input(limit_text, ": room for ", blocks * r.block_size, " tokens of KV cache, fewer than --ctx ", r.max_context,
              " (", human_bytes(double(need_blocks) * double(costs.bytes_per_block)), " needed; raise --gpu-memory or "
              "lower --ctx)");
  p.sizing.n_blocks = int32_t(blocks);
  p.kv_bytes = uint64_t(blocks) * costs.bytes_per_block;
  return p;
}

}  // namespace kestrel

#include "backend/cpu/cpu_ops.h"

#include <cstring>
#include <fstream>
#include <optional>

#include "backend/cpu/kernels.h"
#include "quant/quant.h"

namespace kestrel {

std::string CpuOps::device_name() const {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? "cpu" : line.substr(begin);
  }
  return "cpu";  // no /proc/cpuinfo, or no model name in it
}

CpuOps::CpuOps(DType activations) : activations_(activations) {
  KCHECK_MSG(activations == DType::kF32 || activations == DType::kF64, "CpuOps: activations must be F32 or F64, not ",
             dtype_name(activations));
}

bool CpuOps::supports_weight_dtype(DType dtype) const {
  if (dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32) return true;
  const std::optional<GgmlType> type = dtype_is_quantized(dtype) ? dtype_to_ggml(dtype) : std::nullopt;
  return type && quant::has_kernels(*type);
}

Buffer CpuOps::alloc(DType dtype, int64_t rows, int64_t cols) { return host_buffer(dtype, rows, cols); }

Buffer CpuOps::upload(const Tensor& host) {
  Buffer b = host_buffer(host.dtype, host.rows, host.cols);
  if (host.nbytes()) std::memcpy(b.view().data, host.data, host.nbytes());
  return b;
}

void CpuOps::to_host(const Tensor& src, void* dst) {
  if (src.nbytes()) std::memcpy(dst, src.data, src.nbytes());
}

void CpuOps::zero(const Tensor& t) {
  if (t.nbytes()) std::memset(t.data, 0, t.nbytes());
}

void CpuOps::zero_rows(const Tensor& t, int64_t row) {
  const size_t row_bytes = t.row_bytes();
  std::memset(static_cast<uint8_t*>(t.data) + size_t(row) * row_bytes, 0, row_bytes);
}

void CpuOps::copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) {
  KCHECK(dst.cols == src.cols && dst.dtype == src.dtype && dst_row + n <= dst.rows && src_row + n <= src.rows);
  const size_t row_bytes = dst.row_bytes();
  std::memmove(static_cast<uint8_t*>(dst.data) + size_t(dst_row) * row_bytes,
               static_cast<const uint8_t*>(src.data) + size_t(src_row) * row_bytes, size_t(n) * row_bytes);
}

void CpuOps::embed(const Tensor& out, const Tensor& table, const StepPlan& plan, double scale) {
  cpu::embed(out, table, plan, scale);
}
void CpuOps::rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps) { cpu::rms_norm(out, x, w, eps); }
void CpuOps::head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps) {
  cpu::head_rms_norm(x, w, head_dim, eps);
}
void CpuOps::add(const Tensor& out, const Tensor& a, const Tensor& b) { cpu::add(out, a, b); }
void CpuOps::add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out, float eps) {
  cpu::add_rms_norm(residual, x, w, out, eps);
}
void CpuOps::mul_sigmoid(const Tensor& x, const Tensor& gate) { cpu::mul_sigmoid(x, gate); }
void CpuOps::silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) { cpu::silu_mul(out, gate, up); }
void CpuOps::gelu_tanh_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  cpu::gelu_tanh_mul(out, gate, up);
}
void CpuOps::scale(const Tensor& x, double s) { cpu::scale(x, s); }
void CpuOps::slice_cols(const Tensor& out, const Tensor& x, int64_t begin) { cpu::slice_cols(out, x, begin); }
void CpuOps::gather_rows(const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows) {
  cpu::gather_rows(out, x, rows);
}
void CpuOps::softcap(const Tensor& x, float cap) { cpu::softcap(x, cap); }
void CpuOps::argmax(const Tensor& ids, const Tensor& x) { cpu::argmax(ids, x); }
void CpuOps::sample_candidates(const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                               std::span<const float> temperatures) {
  cpu::sample_candidates(ids, scaled, mass, x, temperatures);
}
void CpuOps::activation(const Tensor& x, Activation act) { cpu::activation(x, act); }
void CpuOps::mul(const Tensor& out, const Tensor& a, const Tensor& b) { cpu::mul(out, a, b); }
void CpuOps::group_rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps) {
  cpu::group_rms_norm(out, x, w, group, eps);
}
void CpuOps::embed_rows(const Tensor& out, const std::vector<Tensor>& shards, const std::vector<int32_t>& ids) {
  cpu::embed_rows(out, shards, ids);
}
void CpuOps::token_windows(const Tensor& windows, const Tensor& context, int32_t eos, const StepPlan& plan) {
  cpu::token_windows(windows, context, eos, plan);
}
void CpuOps::ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                         const Tensor& hash) {
  cpu::ngram_embed(out, shards, windows, hash);
}
void CpuOps::streams_expand(const Tensor& out, const Tensor& y) { cpu::streams_expand(out, y); }
void CpuOps::streams_mix(const Tensor& out, const Tensor& w, const Tensor& x) { cpu::streams_mix(out, w, x); }
void CpuOps::streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) {
  cpu::streams_inject(x, y, w, accumulate);
}
void CpuOps::stream_gate(const Tensor& g, const Tensor& a, const Tensor& b) { cpu::stream_gate(g, a, b); }
void CpuOps::qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                        const KvLayerView& cache, const QsaParams& p, const StepPlan& plan) {
  cpu::qsa_select(select, q, k, k_norm, cache, p, plan);
}
void CpuOps::dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state, int kernel,
                                 int dilation, const StepPlan& plan) {
  cpu::dilated_conv1d_silu(out, x, w, state, kernel, dilation, plan);
}
void CpuOps::matmul(const Tensor& out, const Tensor& x, const Tensor& w) { cpu::matmul(out, x, w); }
void CpuOps::rope(const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan) {
  cpu::rope(x, head_dim, rope, plan);
}
void CpuOps::attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const KvLayerView& cache,
                       const AttentionParams& p, const StepPlan& plan) {
  cpu::attention(out, q, k, v, cache, p, plan);
}
void CpuOps::kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) {
  cpu::kv_write(cache, k, v, plan);
}
void CpuOps::conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                         const StepPlan& plan) {
  cpu::conv1d_silu(x, w, state, kernel, plan);
}
void CpuOps::gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b,
                              const Tensor& a_neg, const Tensor& dt_bias, const StateLayerView& state,
                              const DeltaNetConfig& cfg, const StepPlan& plan) {
  cpu::gated_delta_rule(out, qkv, a, b, a_neg, dt_bias, state, cfg, plan);
}
void CpuOps::gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) {
  cpu::gated_rms_norm(x, z, w, head_dim, eps);
}
void CpuOps::moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k, bool norm_topk) {
  cpu::moe_route(ids, weights, logits, top_k, norm_topk);
}
void CpuOps::moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                         const ExpertWeights& experts) {
  cpu::moe_experts(out, x, ids, weights, experts);
}

}  // namespace kestrel

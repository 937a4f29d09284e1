// The CPU reference kernels, one file per op (named like the op in ops/ops.h).
// Plain loops, fp32 accumulation, multithreaded over the global ThreadPool with static
// partitions over independent outputs, so every result is bit-identical whatever else shares
// the batch and however many threads run.
#pragma once

#include <cstdint>
#include <type_traits>
#include <span>
#include <vector>

#include "ops/ops.h"

namespace kestrel::cpu {

// Activations (and caches, recurrent state, logits) are F32, or F64 in the float64 oracle mode
// (CpuOps(DType::kF64)). Each kernel is written once over the activation type A and dispatched on
// the tensor's dtype; with A = float it computes exactly what the F32 backend always has.
template <typename A>
inline constexpr DType kActDType = std::is_same_v<A, double> ? DType::kF64 : DType::kF32;

template <typename A>
A* act(const Tensor& t) {
  KCHECK_MSG(t.dtype == kActDType<A>, "CPU kernel: activation of dtype ", dtype_name(t.dtype), " where ",
             dtype_name(kActDType<A>), " was expected");
  return static_cast<A*>(t.data);
}

// Calls f.template operator()<A>() with A = float for an F32 tensor, double for F64.
template <typename F>
void with_act(const Tensor& t, F&& f) {
  if (t.dtype == DType::kF64) {
    f.template operator()<double>();
  } else {
    KCHECK_MSG(t.dtype == DType::kF32, "CPU kernel: activations must be F32 or F64, got ", dtype_name(t.dtype));
    f.template operator()<float>();
  }
}

// Reads element i of a BF16/F16/F32 row as float.
float load_element(const Tensor& t, int64_t row, int64_t col);
// Copies row `row` of a BF16/F16/F32 tensor (or an F64 one into a double row) into dst; a
// block-format row (Q8_0 ...) is dequantized (ggml's dequantize_row, then widened for double).
void load_row(const Tensor& t, int64_t row, float* dst);
void load_row(const Tensor& t, int64_t row, double* dst);

void embed(const Tensor& out, const Tensor& table, const StepPlan& plan, double scale);
void rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps);
// residual += x, then out = rms_norm(residual) row by row (out may be x, not residual).
void add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out, float eps);
void head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps);
void add(const Tensor& out, const Tensor& a, const Tensor& b);
void mul_sigmoid(const Tensor& x, const Tensor& gate);
void silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up);
void gelu_tanh_mul(const Tensor& out, const Tensor& gate, const Tensor& up);
void scale(const Tensor& x, double s);
void slice_cols(const Tensor& out, const Tensor& x, int64_t begin);
void gather_rows(const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows);
void softcap(const Tensor& x, float cap);
void argmax(const Tensor& ids, const Tensor& x);
void sample_candidates(const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                       std::span<const float> temperatures);
void activation(const Tensor& x, Activation act);
void mul(const Tensor& out, const Tensor& a, const Tensor& b);
void group_rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps);
void embed_rows(const Tensor& out, const std::vector<Tensor>& shards, const std::vector<int32_t>& ids);
void token_windows(const Tensor& windows, const Tensor& context, int32_t eos, const StepPlan& plan);
void ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows, const Tensor& hash);
void streams_expand(const Tensor& out, const Tensor& y);
void streams_mix(const Tensor& out, const Tensor& w, const Tensor& x);
void streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate);
void stream_gate(const Tensor& g, const Tensor& a, const Tensor& b);
void qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm, const KvLayerView& cache,
                const QsaParams& p, const StepPlan& plan);
void dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state, int kernel,
                         int dilation, const StepPlan& plan);
// RoPE of one head vector v [head_dim] at `position` (the rope op's arithmetic).
void rope_vector(float* v, int head_dim, const RopeConfig& rope, int64_t position);
void rope_vector(double* v, int head_dim, const RopeConfig& rope, int64_t position);
void matmul(const Tensor& out, const Tensor& x, const Tensor& w);
void rope(const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan);
void attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const KvLayerView& cache,
               const AttentionParams& p, const StepPlan& plan);
void kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan);
void conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel, const StepPlan& plan);
void gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b, const Tensor& a_neg,
                      const Tensor& dt_bias, const StateLayerView& state, const DeltaNetConfig& cfg,
                      const StepPlan& plan);
void gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps);
void moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k, bool norm_topk);
void moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                 const ExpertWeights& experts);

// dot(x[0..n), w-row) with the fixed accumulation order every CPU kernel uses.
float dot_f32(const float* x, const float* w, int64_t n);
float dot_bf16(const float* x, const uint16_t* w, int64_t n);
double dot_f64(const double* x, const double* w, int64_t n);
inline float dot_act(const float* x, const float* w, int64_t n) { return dot_f32(x, w, n); }
inline double dot_act(const double* x, const double* w, int64_t n) { return dot_f64(x, w, n); }

}  // namespace kestrel::cpu

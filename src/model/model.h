// Model: a loaded checkpoint on one backend, and the forward pass over a StepPlan.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cache/model_cache.h"
#include "model/config.h"
#include "model/workspace.h"
#include "ops/ops.h"

namespace kestrel {

// Optional host copies of the hidden state after each layer (index 0: the embedding output),
// for checking against a reference. Each entry is [T, H] row-major.
struct HiddenCapture {
  std::vector<std::vector<float>> layers;
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return cfg_; }
  Ops& ops() const { return ops_; }

  // One step over a batch: writes logits [plan.logit_rows.size(), vocab] (F32, backend memory).
  virtual void forward(const StepPlan& plan, ModelCache& cache, const Tensor& logits,
                       HiddenCapture* capture = nullptr) = 0;

  // Why a decode step of this model may not be recorded as a graph (ops/step_graphs.h), or null
  // when it may: its forward pass then queues the same device work, with the same arguments, for
  // every step of one shape, all per-step host data reaching the device through the StepPlan
  // (Ops::begin_step). Architectures opt in once that is checked (tests/gpu/step_graphs_test.cc).
  virtual const char* graph_blocker() const { return "its forward pass is not checked under graph capture"; }

  uint64_t parameter_count() const { return n_params_; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  // The weight bytes a step over `rows` token rows has to read (`kestrel bench`'s roofline): every
  // matrix once, except tables the forward pass only gathers rows from (a token embedding that is
  // not also the output head, per-layer and n-gram embeddings: the rows gathered) and the routed
  // experts (with E experts, top-k and independent uniform routing, E (1 - (1 - k/E)^rows)
  // distinct experts per MoE layer).
  double weight_bytes_per_step(int64_t rows) const;

 protected:
  Model(ModelConfig cfg, Ops& ops) : cfg_(std::move(cfg)), ops_(ops), ws_(ops) {}
  void capture_hidden(HiddenCapture* capture, const Tensor& x);
  // Records, for weight_bytes_per_step, a loaded table that is only read by gathering rows from
  // it, `rows_per_token` of its rows a token (a fraction where the rows spread over shards). A
  // table that is also read whole (a token embedding tied to the head) is not one.
  void gathered_table(const Tensor& table, double rows_per_token);
  // Records one layer's routed experts for weight_bytes_per_step.
  void routed_experts(const ExpertWeights& experts);
  // The end of a forward pass whose residual stream x [T, H] is followed by a final RMSNorm:
  // captures the normed last hidden state (as transformers reports it), then writes the logits
  // [plan.logit_rows.size(), vocab] of the requested rows through lm_head [vocab, H].
  void norm_and_head(const StepPlan& plan, const Tensor& x, const Tensor& final_norm, const Tensor& lm_head,
                     const Tensor& logits, HiddenCapture* capture);
  // The same after the last sub-layer's residual add x += y [T, H]: at a decode step (every row a
  // logit row, nothing captured) one add_rms_norm writes the head's rows, the same bits as the add
  // and the norm apart.
  void add_norm_and_head(const StepPlan& plan, const Tensor& x, const Tensor& y, const Tensor& final_norm,
                         const Tensor& lm_head, const Tensor& logits, HiddenCapture* capture);

  ModelConfig cfg_;
  Ops& ops_;
  Workspace ws_;
  uint64_t n_params_ = 0;
  uint64_t weight_bytes_ = 0;

 private:
  uint64_t gathered_bytes_ = 0;      // bytes of the gather-only tables (inside weight_bytes_)
  double gathered_row_bytes_ = 0;    // bytes a token gathers from them
  uint64_t expert_bytes_ = 0;        // bytes of every routed expert (inside weight_bytes_)
};

}  // namespace kestrel

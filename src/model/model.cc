#include "model/model.h"

#include <algorithm>
#include <cmath>

namespace kestrel {

void Model::capture_hidden(HiddenCapture* capture, const Tensor& x) {
  if (!capture) return;
  std::vector<float> host(size_t(x.numel()));
  ops_.to_host_f32(x, host.data());
  capture->layers.push_back(std::move(host));
}

void Model::gathered_table(const Tensor& table, double rows_per_token) {
  gathered_bytes_ += table.nbytes();
  gathered_row_bytes_ += rows_per_token * double(table.row_bytes());
}

void Model::routed_experts(const ExpertWeights& experts) {
  for (const auto* list : {&experts.gate, &experts.up, &experts.down}) {
    for (const Tensor& t : *list) expert_bytes_ += t.nbytes();
  }
}

double Model::weight_bytes_per_step(int64_t rows) const {
  const double gathered = std::min(double(gathered_bytes_), gathered_row_bytes_ * double(rows));
  double experts = double(expert_bytes_);
  if (cfg_.moe.n_experts > 0) {
    const double E = cfg_.moe.n_experts, k = cfg_.moe.top_k;
    experts *= 1.0 - std::pow(1.0 - k / E, double(rows));  // the touched fraction of each layer's experts
  }
  return double(weight_bytes_) - double(gathered_bytes_) - double(expert_bytes_) + gathered + experts;
}

void Model::norm_and_head(const StepPlan& plan, const Tensor& x, const Tensor& final_norm, const Tensor& lm_head,
                          const Tensor& logits, HiddenCapture* capture) {
  PhaseScope phase(ops_, Phase::kHead);
  const int64_t T = x.rows, H = x.cols;
  if (capture) {
    Tensor all = ws_.take(T, H);
    ops_.rms_norm(all, x, final_norm, cfg_.norm_eps);
    capture_hidden(capture, all);
  }
  const int64_t R = int64_t(plan.logit_rows.size());
  if (R == 0) return;
  KCHECK(logits.rows == R && logits.cols == cfg_.vocab_size);
  Tensor rows = ws_.take(R, H);
  if (plan.logits_for_every_row()) {  // a decode step: the norm reads the rows in place, no gather launch
    ops_.rms_norm(rows, x, final_norm, cfg_.norm_eps);
  } else {
    ops_.gather_rows(rows, x, plan.logit_rows);
    ops_.rms_norm(rows, rows, final_norm, cfg_.norm_eps);
  }
  ops_.matmul(logits, rows, lm_head);
}

void Model::add_norm_and_head(const StepPlan& plan, const Tensor& x, const Tensor& y, const Tensor& final_norm,
                              const Tensor& lm_head, const Tensor& logits, HiddenCapture* capture) {
  const int64_t R = int64_t(plan.logit_rows.size());
  if (capture || R == 0 || !plan.logits_for_every_row()) {
    ops_.add(x, x, y);
    norm_and_head(plan, x, final_norm, lm_head, logits, capture);
    return;
  }
  PhaseScope phase(ops_, Phase::kHead);
  KCHECK(logits.rows == R && logits.cols == cfg_.vocab_size);
  Tensor rows = ws_.take(R, x.cols);
  ops_.add_rms_norm(x, y, final_norm, rows, cfg_.norm_eps);  // x += y; rows = norm(x)
  ops_.matmul(logits, rows, lm_head);
}

}  // namespace kestrel

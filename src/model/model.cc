#include "model/model.h"

namespace kestrel {

void Model::capture_hidden(HiddenCapture* capture, const Tensor& x) {
  if (!capture) return;
  std::vector<float> host(size_t(x.numel()));
  ops_.to_host_f32(x, host.data());
  capture->layers.push_back(std::move(host));
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
  ops_.gather_rows(rows, x, plan.logit_rows);
  ops_.rms_norm(rows, rows, final_norm, cfg_.norm_eps);
  ops_.matmul(logits, rows, lm_head);
}

}  // namespace kestrel

// Quantization quality: a quantized model against its BF16 source, the source as the teacher.
//
// Both models read the same token windows (non-overlapping, `ctx` tokens each) in one prefill
// and give logits at every position; each position that predicts a next token inside the window
// contributes KL(source || quantized) of the two next-token distributions, whether the two
// top-1 tokens agree, and each model's negative log-likelihood of the true next token.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace kestrel {

struct QuantQualityOptions {
  int64_t ctx = 512;          // tokens per window
  int64_t max_tokens = 8192;  // tokens of the text used (whole windows)
};

struct QuantQuality {
  int64_t positions = 0;       // next-token predictions compared
  int64_t windows = 0;
  double kl_mean = 0, kl_p90 = 0, kl_p99 = 0, kl_max = 0;  // nats
  double top1_agreement = 0;   // fraction of positions
  double ppl_source = 0, ppl_quant = 0;
};

// Error naming the mismatch when the two models' vocabularies differ or the text is shorter than
// two tokens.
QuantQuality measure_quant_quality(Model& quant, Model& source, const std::vector<int32_t>& tokens,
                                   const QuantQualityOptions& options);

}  // namespace kestrel

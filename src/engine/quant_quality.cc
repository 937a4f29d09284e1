#include "engine/quant_quality.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "engine/runner.h"

namespace kestrel {
namespace {

// log-softmax of one row, in double.
void log_softmax(const float* x, int64_t V, std::vector<double>& out) {
  out.resize(size_t(V));
  double mx = -INFINITY;
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, double(x[i]));
  double s = 0;
  for (int64_t i = 0; i < V; ++i) s += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(s);
  for (int64_t i = 0; i < V; ++i) out[size_t(i)] = double(x[i]) - lse;
}

int64_t argmax_row(const std::vector<double>& x) {
  return int64_t(std::max_element(x.begin(), x.end()) - x.begin());
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

QuantQuality measure_quant_quality(Model& quant, Model& source, const std::vector<int32_t>& tokens,
                                   const QuantQualityOptions& o) {
  const int64_t V = source.config().vocab_size;
  if (quant.config().vocab_size != V)
    bad_input("quant-quality: the quantized model's vocabulary (", quant.config().vocab_size,
              ") differs from the source's (", V, ")");
  if (o.ctx < 2) bad_input("quant-quality: --ctx must be at least 2");
  const int64_t n = std::min<int64_t>(int64_t(tokens.size()), o.max_tokens);
  if (n < 2) bad_input("quant-quality: the text gives ", n, " tokens; at least 2 are needed");
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[size_t(i)] < 0 || tokens[size_t(i)] >= V)
      bad_input("quant-quality: token id ", tokens[size_t(i)], " is outside the vocabulary [0, ", V, ")");
  }
  QuantQuality q;
  std::vector<double> kls;
  double nll_s = 0, nll_q = 0;
  int64_t agree = 0;
  std::vector<double> ls, lq;
  for (int64_t w0 = 0; w0 + 1 < n; w0 += o.ctx) {
    const int64_t len = std::min(o.ctx, n - w0);
    if (len < 2) break;
    const std::span<const int32_t> win(tokens.data() + w0, size_t(len));
    Runner rs(source, cpu_cache_sizing(source.config(), 1, len));
    Runner rq(quant, cpu_cache_sizing(quant.config(), 1, len));
    SequenceState ss, sq;
    rs.start(ss);
    rq.start(sq);
    const std::vector<float> logits_s = rs.step({{.seq = &ss, .tokens = win, .all_logits = true}});
    const std::vector<float>& logits_q = rq.step({{.seq = &sq, .tokens = win, .all_logits = true}});
    for (int64_t t = 0; t + 1 < len; ++t) {
      log_softmax(logits_s.data() + t * V, V, ls);
      log_softmax(logits_q.data() + t * V, V, lq);
      double kl = 0;
      for (int64_t i = 0; i < V; ++i) {
        const double p = std::exp(ls[size_t(i)]);
        if (p > 0) kl += p * (ls[size_t(i)] - lq[size_t(i)]);
      }
      kls.push_back(std::max(0.0, kl));
      agree += argmax_row(ls) == argmax_row(lq) ? 1 : 0;
      const int32_t next = win[size_t(t + 1)];
      nll_s -= ls[size_t(next)];
      nll_q -= lq[size_t(next)];
    }
    ++q.windows;
  }
  q.positions = int64_t(kls.size());
  double sum = 0;
  for (double k : kls) sum += k;
  q.kl_mean = sum / double(q.positions);
  q.kl_p90 = percentile(kls, 0.90);
  q.kl_p99 = percentile(kls, 0.99);
  q.kl_max = *std::max_element(kls.begin(), kls.end());
  q.top1_agreement = double(agree) / double(q.positions);
  q.ppl_source = std::exp(nll_s / double(q.positions));
  q.ppl_quant = std::exp(nll_q / double(q.positions));
  return q;
}

}  // namespace kestrel

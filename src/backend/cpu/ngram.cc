// token_windows and ngram_embed (ops.h): the windows from each sequence's context and the step's
// tokens, then each window's hashed table rows gathered as embed_rows gathers (ops/ngram.h).
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels.h"
#include "ops/ngram.h"

namespace kestrel::cpu {

void token_windows(const Tensor& windows, const Tensor& context, int32_t eos, const StepPlan& plan) {
  ngram::check_token_windows(windows, context, plan);
  const int n = int(windows.cols), ctx = n - 1;
  auto* win = windows.as<int32_t>();
  for (const SeqStep& s : plan.seqs) {
    int32_t* c = context.as<int32_t>() + int64_t(s.state_slot) * ctx;
    const int32_t* toks = plan.tokens.data() + s.row_begin;
    // history: ctx places of context (eos for a new sequence), then the step's tokens
    std::vector<int32_t> hist(size_t(ctx), eos);
    if (s.n_past > 0) hist.assign(c, c + ctx);
    hist.insert(hist.end(), toks, toks + s.n_tokens);
    auto at = [&](int64_t j) { return hist[size_t(j)]; };
    for (int32_t t = 0; t < s.n_tokens; ++t)
      ngram::token_window(at, ctx + t, n, eos, win + int64_t(s.row_begin + t) * n);
    std::copy(hist.end() - ctx, hist.end(), c);
  }
}

void ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows, const Tensor& hash) {
  ngram::check_ngram_embed(out, shards, windows, hash);
  const int n = int(windows.cols), heads = int((hash.cols - n) / 2);
  const ngram::PackedHash ph{hash.as<const int64_t>(), n, heads};
  std::vector<int32_t> ids(size_t(out.rows));
  for (int64_t t = 0; t < windows.rows; ++t) {
    const int32_t* w = windows.as<const int32_t>() + t * n;
    for (int h = 0; h < heads; ++h) {
      const int64_t row = ngram::head_row(w, ph, h);
      KCHECK_MSG(row >= 0 && row < (int64_t(1) << 31), "ngram_embed: table row ", row, " out of range");
      ids[size_t(t * heads + h)] = int32_t(row);
    }
  }
  embed_rows(out, shards, ids);
}

}  // namespace kestrel::cpu

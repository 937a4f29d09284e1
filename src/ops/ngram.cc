#include "ops/ngram.h"

#include "core/error.h"

namespace kestrel::ngram {

void check_token_windows(const Tensor& windows, const Tensor& context, const StepPlan& plan) {
  const int64_t n = windows.cols;
  KCHECK_MSG(windows.dtype == DType::kI32 && context.dtype == DType::kI32, "token_windows: windows and context must be I32");
  KCHECK_MSG(n >= 2 && n <= kMaxN && context.cols == n - 1, "token_windows: windows [", windows.rows, ", ", n,
             "] and context [", context.rows, ", ", context.cols, "] (n from 2 to ", kMaxN, ", context n - 1 wide)");
  KCHECK_MSG(windows.rows == plan.n_rows(), "token_windows: ", windows.rows, " window rows for a step of ",
             plan.n_rows());
  for (const SeqStep& s : plan.seqs) {
    KCHECK_MSG(s.state_slot >= 0 && s.state_slot < context.rows, "token_windows: sequence slot ", s.state_slot,
               " outside the context's ", context.rows, " slots");
  }
}

int64_t check_ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                          const Tensor& hash) {
  const int64_t n = windows.cols;
  KCHECK_MSG(windows.dtype == DType::kI32 && n >= 2 && n <= kMaxN, "ngram_embed: windows must be I32 [T, 2..",
             kMaxN, "]");
  KCHECK_MSG(hash.dtype == DType::kI64 && hash.rows == 1 && hash.cols > n && (hash.cols - n) % (2 * (n - 1)) == 0,
             "ngram_embed: hash must be I64 [1, n + 2 * heads] with heads a multiple of n - 1 (n = ", n, ", got [",
             hash.rows, ", ", hash.cols, "])");
  const int64_t heads = (hash.cols - n) / 2;
  KCHECK_MSG(out.rows == windows.rows * heads, "ngram_embed: out has ", out.rows, " rows for ", windows.rows,
             " windows of ", heads, " heads");
  KCHECK_MSG(!shards.empty(), "ngram_embed: no table");
  int64_t rows = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    KCHECK_MSG(shards[s].cols == out.cols && shards[s].dtype == shards[0].dtype, "ngram_embed: shard ", s, " is [",
               shards[s].rows, ", ", shards[s].cols, "] ", dtype_name(shards[s].dtype), " (need ", out.cols,
               " columns, the first shard's dtype)");
    KCHECK_MSG(s + 1 == shards.size() || shards[s].rows == shards[0].rows, "ngram_embed: shard ", s, " has ",
               shards[s].rows, " rows, the first ", shards[0].rows, " (shards but the last must be equal)");
    rows += shards[s].rows;
  }
  return rows;
}

}  // namespace kestrel::ngram

#include "ops/step_plan.h"

#include "core/error.h"

namespace kestrel {

void StepPlan::add_sequence(const int32_t* new_tokens, int32_t n_tokens, int32_t n_past, int32_t state_slot,
                            const std::vector<int32_t>& blocks, bool all_logits, bool last_logit) {
  KCHECK(n_tokens >= 1 && n_past >= 0);
  KCHECK_MSG(int64_t(blocks.size()) * block_size >= int64_t(n_past) + n_tokens, "block table too short");
  SeqStep s{.row_begin = n_rows(), .n_tokens = n_tokens, .n_past = n_past, .state_slot = state_slot,
            .table_begin = int32_t(block_tables.size()), .n_blocks = int32_t(blocks.size())};
  block_tables.insert(block_tables.end(), blocks.begin(), blocks.end());
  for (int32_t i = 0; i < n_tokens; ++i) {
    tokens.push_back(new_tokens[i]);
    positions.push_back(n_past + i);
    row_seq.push_back(int32_t(seqs.size()));
    if (all_logits || (last_logit && i == n_tokens - 1)) logit_rows.push_back(s.row_begin + i);
  }
  seqs.push_back(s);
}

bool StepPlan::logits_for_every_row() const {
  if (logit_rows.size() != tokens.size()) return false;
  for (size_t i = 0; i < logit_rows.size(); ++i)
    if (logit_rows[i] != int32_t(i)) return false;
  return true;
}

void StepPlan::clear() {
  tokens.clear();
  positions.clear();
  row_seq.clear();
  seqs.clear();
  block_tables.clear();
  logit_rows.clear();
}

}  // namespace kestrel

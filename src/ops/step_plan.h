// StepPlan: the host-side description of one forward step over a batch of sequences.
//
// The new tokens of every sequence are flattened into rows [0, T) of the activations; each
// sequence owns a contiguous run of rows. Prefill chunks and decode tokens mix freely: a decode
// token is just a sequence with n_tokens == 1. Built once per step (by the generation loop or
// the scheduler) and handed to the backend, which may copy it to the device before the layers run.
#pragma once

#include <cstdint>
#include <vector>

namespace kestrel {

struct SeqStep {
  int32_t row_begin = 0;    // first row of this sequence's new tokens
  int32_t n_tokens = 0;     // new tokens this step (>= 1)
  int32_t n_past = 0;       // tokens already in the cache before this step
  int32_t state_slot = -1;  // recurrent-state slot (linear-attention layers), -1 if the model has none
  int32_t table_begin = 0;  // this sequence's KV block ids: StepPlan::block_tables[table_begin, +n_blocks)
  int32_t n_blocks = 0;
};

struct StepPlan {
  std::vector<int32_t> tokens;        // [T] token ids
  std::vector<int32_t> positions;     // [T] absolute position of each row
  std::vector<int32_t> row_seq;       // [T] which SeqStep each row belongs to
  std::vector<SeqStep> seqs;
  std::vector<int32_t> block_tables;  // concatenated block tables
  std::vector<int32_t> logit_rows;    // rows whose logits are wanted, in output order
  int32_t block_size = 16;

  int32_t n_rows() const { return int32_t(tokens.size()); }
  // Whether every row wants its logits, in row order (a decode step): the head can then read the
  // rows where they are. add_sequence appends logit rows in ascending order, so this holds exactly
  // when there are n_rows() of them, which a step graph's shape (rows, logit rows) records.
  bool logits_for_every_row() const;

  // Appends a sequence's new tokens. `blocks` must cover n_past + tokens.size() positions.
  void add_sequence(const int32_t* new_tokens, int32_t n_tokens, int32_t n_past, int32_t state_slot,
                    const std::vector<int32_t>& blocks, bool all_logits, bool last_logit);
  void clear();
};

}  // namespace kestrel

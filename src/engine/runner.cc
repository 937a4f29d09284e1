#include "engine/runner.h"

#include "core/error.h"

namespace kestrel {

CacheSizing cpu_cache_sizing(const ModelConfig& cfg, int32_t max_seqs, int64_t max_tokens) {
  CacheSizing s;
  s.block_size = 16;
  const int64_t per_seq = (max_tokens + s.block_size - 1) / s.block_size;
  s.n_blocks = int32_t(per_seq * max_seqs);
  s.n_slots = max_seqs;
  return s;
}

Runner::Runner(Model& model, CacheSizing sizing) : model_(model), cache_(model.config(), model.ops(), sizing) {
  plan_.block_size = sizing.block_size;
}

void Runner::start(SequenceState& seq) {
  KCHECK(!seq.live);
  seq.blocks.clear();
  seq.n_cached = 0;
  seq.slot = -1;
  if (cache_.needs_slots()) {
    seq.slot = cache_.acquire_slot();
    if (seq.slot < 0) fail(ErrorKind::kOutOfMemory, "no free recurrent-state slot (", cache_.sizing().n_slots,
                           " sequences already running)");
  }
  seq.live = true;
}

void Runner::finish(SequenceState& seq) {
  if (!seq.live) return;
  cache_.release(seq.blocks);
  cache_.release_slot(seq.slot);
  seq.slot = -1;
  seq.n_cached = 0;
  seq.live = false;
}

Tensor Runner::forward(const std::vector<StepItem>& items, HiddenCapture* capture) {
  // Reserve first, so a failure leaves every sequence as it was.
  std::vector<size_t> before;
  for (const auto& it : items) before.push_back(it.seq->blocks.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    KCHECK(it.seq->live && !it.tokens.empty());
    if (!cache_.reserve(it.seq->blocks, int64_t(it.seq->n_cached) + int64_t(it.tokens.size()))) {
      for (size_t j = 0; j <= i; ++j) {
        auto& b = items[j].seq->blocks;
        std::vector<int32_t> extra(b.begin() + long(before[j]), b.end());
        b.resize(before[j]);
        cache_.release(extra);
      }
      fail(ErrorKind::kOutOfMemory, "KV cache exhausted: ", cache_.free_blocks(), " free blocks of ",
           cache_.sizing().block_size, " tokens cannot hold ", it.tokens.size(), " more tokens");
    }
  }
  plan_.clear();
  for (const auto& it : items) {
    plan_.add_sequence(it.tokens.data(), int32_t(it.tokens.size()), it.seq->n_cached, it.seq->slot, it.seq->blocks,
                       it.all_logits && !it.no_logits, !it.no_logits);
  }
  const int64_t V = model_.config().vocab_size;
  const int64_t R = int64_t(plan_.logit_rows.size());
  if (logits_.empty() || logits_.view().rows < R) logits_ = model_.ops().alloc(model_.ops().activation_dtype(), std::max<int64_t>(R, 1), V);
  Tensor out = logits_.view().rows_slice(0, R);
  model_.forward(plan_, cache_, out, capture);
  for (const auto& it : items) it.seq->n_cached += int32_t(it.tokens.size());
  return out;
}

const std::vector<float>& Runner::step(const std::vector<StepItem>& items, HiddenCapture* capture) {
  const Tensor out = forward(items, capture);
  host_logits_.resize(size_t(out.numel()));
  if (out.rows) model_.ops().to_host_f32(out, host_logits_.data());
  return host_logits_;
}

const std::vector<int32_t>& Runner::step_argmax(const std::vector<StepItem>& items) {
  const Tensor out = forward(items, nullptr);
  const int64_t R = out.rows;
  if (ids_.empty() || ids_.view().rows < R) ids_ = model_.ops().alloc(DType::kI32, std::max<int64_t>(R, 1), 1);
  const Tensor ids = ids_.view().rows_slice(0, R);
  host_ids_.resize(size_t(R));
  if (R) {
    model_.ops().argmax(ids, out);
    model_.ops().to_host(ids, host_ids_.data());
  }
  return host_ids_;
}

}  // namespace kestrel

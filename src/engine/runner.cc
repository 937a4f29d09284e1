#include "engine/runner.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/step_graphs.h"

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
  graphs_ = dynamic_cast<StepGraphs*>(&model.ops());
  if (!graphs_) graph_stats_.off = cat("the ", model.ops().name(), " backend records no step graphs");
  else if (const char* why = model.graph_blocker()) graph_stats_.off = why;
  if (!graph_stats_.off.empty()) graphs_ = nullptr;
}

Runner::~Runner() {
  if (graphs_) graphs_->drop_graphs(this);
}

// A decode step from a graph: see runner.h.

bool Runner::run_graph(const std::vector<StepItem>& items, const Tensor& out) {
  if (graphs_) graph_stats_.off = graphs_->graphs_off_reason();  // the backend's switches may change
  if (!graph_stats_.off.empty()) {
    ++graph_stats_.eager;
    return false;
  }
  // A replayed step skips the forward pass's host checks: check what the device would index with.
  const int64_t V = model_.config().vocab_size;
  for (const auto& it : items) {
    KCHECK_MSG(it.tokens[0] >= 0 && it.tokens[0] < V, "token id ", it.tokens[0], " outside the vocabulary");
  }
  const StepGraphKey key{this, plan_.n_rows()};
  Bucket& b = buckets_[key.rows];
  if (b.recorded) {
    if (graphs_->replay_step(key, plan_)) {
      ++graph_stats_.replayed;
      return true;
    }
    b.recorded = false;  // stale: warm up again, then record
    b.eager_runs = 0;
  }
  if (b.failures < 3 && b.eager_runs >= 2) {
    graphs_->begin_capture(key, plan_);
    std::string why;
    try {
      model_.forward(plan_, cache_, out, nullptr);
      why = graphs_->end_capture();
    } catch (const std::exception& e) {
      graphs_->abort_capture();
      why = e.what();
    }
    if (why.empty()) {
      b.recorded = true;
      ++graph_stats_.recorded;
      return true;
    }
    ++b.failures;
    b.eager_runs = 0;
    graph_stats_.failure = why;
  }
  ++b.eager_runs;
  ++graph_stats_.eager;
  return false;
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
  bool decode = !capture;
  for (const auto& it : items) decode = decode && it.tokens.size() == 1 && !it.no_logits;
  if (!decode || !run_graph(items, out)) model_.forward(plan_, cache_, out, capture);
  for (const auto& it : items) it.seq->n_cached += int32_t(it.tokens.size());
  return out;
}

const std::vector<float>& Runner::step(const std::vector<StepItem>& items, HiddenCapture* capture) {
  const Tensor out = forward(items, capture);
  host_logits_.resize(size_t(out.numel()));
  if (out.rows) model_.ops().to_host_f32(out, host_logits_.data());
  return host_logits_;
}

Tensor Runner::argmax_ids(const std::vector<StepItem>& items) {
  const Tensor out = forward(items, nullptr);
  const int64_t R = out.rows;
  if (ids_.empty() || ids_.view().rows < R) ids_ = model_.ops().alloc(DType::kI32, std::max<int64_t>(R, 1), 1);
  const Tensor ids = ids_.view().rows_slice(0, R);
  if (R) model_.ops().argmax(ids, out);
  return ids;
}

const std::vector<int32_t>& Runner::step_argmax(const std::vector<StepItem>& items) {
  const Tensor ids = argmax_ids(items);
  host_ids_.resize(size_t(ids.rows));
  if (ids.rows) model_.ops().to_host(ids, host_ids_.data());
  return host_ids_;
}

void Runner::queue_step_argmax(const std::vector<StepItem>& items) { argmax_ids(items); }

const Runner::Candidates& Runner::step_candidates(const std::vector<StepItem>& items,
                                                  std::span<const float> temperatures, int64_t m) {
  const Tensor out = forward(items, nullptr);
  const int64_t R = out.rows;
  KCHECK_MSG(int64_t(temperatures.size()) == R && m >= 1, "step_candidates: ", temperatures.size(),
             " temperatures for ", R, " rows, ", m, " candidates");
  m = std::min<int64_t>(m, out.cols);
  Ops& ops = model_.ops();
  // One allocation holds the step's results, [mass f64 x R | ids i32 x R m | scaled f32 x R m],
  // so they come back in one copy (one wait on the backend) instead of three.
  const int64_t words = std::max<int64_t>(R, 1) * (1 + m);  // 8-byte words
  if (cand_.empty() || cand_.view().rows < words)  // grown at least twofold: few reallocations as batches grow
    cand_ = ops.alloc(DType::kF64, std::max(words, cand_.empty() ? int64_t(0) : 2 * cand_.view().rows), 1);
  candidates_.m = m;
  candidates_.ids.resize(size_t(R * m));
  candidates_.scaled.resize(size_t(R * m));
  candidates_.mass.resize(size_t(R));
  last_logits_ = out;
  if (R) {
    const size_t ids_at = size_t(R) * 8, scaled_at = ids_at + size_t(R * m) * 4;  // byte offsets
    const Tensor all = cand_.view().rows_slice(0, R * (1 + m));
    uint8_t* const base = static_cast<uint8_t*>(all.data);
    const Tensor mass{.dtype = DType::kF64, .device = all.device, .data = base, .rows = R, .cols = 1};
    const Tensor ids{.dtype = DType::kI32, .device = all.device, .data = base + ids_at, .rows = R, .cols = m};
    const Tensor scaled{.dtype = DType::kF32, .device = all.device, .data = base + scaled_at, .rows = R, .cols = m};
    ops.sample_candidates(ids, scaled, mass, out, temperatures);
    cand_host_.resize(size_t(R * (1 + m)));
    ops.to_host(all, cand_host_.data());
    const uint8_t* const h = reinterpret_cast<const uint8_t*>(cand_host_.data());
    std::memcpy(candidates_.mass.data(), h, ids_at);
    std::memcpy(candidates_.ids.data(), h + ids_at, scaled_at - ids_at);
    std::memcpy(candidates_.scaled.data(), h + scaled_at, size_t(R * m) * 4);
  }
  return candidates_;
}

int64_t Runner::candidate_count(int setting, Device device, const char* who) {
  if (setting < -1 || setting > kMaxSampleCandidates)
    bad_input(who, ": sample_candidates must be -1 (auto), 0 (off) or a count up to ", kMaxSampleCandidates, ", got ",
              setting);
  if (setting >= 0) return setting;
  return device == Device::kCpu ? 0 : 1024;
}

void Runner::row_logits(int64_t r, float* dst) {
  KCHECK_MSG(r >= 0 && r < last_logits_.rows, "row_logits: row ", r, " of ", last_logits_.rows);
  model_.ops().to_host_f32(last_logits_.rows_slice(r, 1), dst);
}

}  // namespace kestrel

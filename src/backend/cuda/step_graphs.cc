#include "backend/cuda/step_graphs.h"

#include <algorithm>
#include <cstring>

namespace kestrel::cuda {

PlanBuffer::~PlanBuffer() {
  if (copied_) {
    cudaEventSynchronize(copied_);
    cudaEventDestroy(copied_);
  }
  if (host_) cudaFreeHost(host_);
  if (dev_) cudaFree(dev_);
}

StepView PlanBuffer::upload(const StepPlan& plan, cudaStream_t stream) {
  static_assert(sizeof(SeqStep) == 6 * sizeof(int32_t), "SeqStep is packed as 6 int32 for the device");
  const size_t T = plan.tokens.size(), S = plan.seqs.size(), B = plan.block_tables.size(),
               R = plan.logit_rows.size();
  KCHECK(plan.positions.size() == T && plan.row_seq.size() == T);
  constexpr size_t kHead = 4;  // max_position and padding (keeps the arrays 16-byte aligned)
  const size_t o_tok = kHead, o_pos = o_tok + T, o_seq_of = o_pos + T, o_seqs = o_seq_of + T, o_logit = o_seqs + 6 * S,
               o_tables = o_logit + R, total = o_tables + B;
  if (!copied_) CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventSynchronize(copied_));  // the previous step's copy has read the staging
  if (cap_ < total) {
    guard_.check("begin_step: growing the plan buffer");
    guard_.epoch.fetch_add(1);  // graphs recorded with the old buffer read freed memory now
    if (host_) CUDA_CHECK(cudaFreeHost(host_));
    if (dev_) CUDA_CHECK(cudaFree(dev_));
    host_ = nullptr;
    dev_ = nullptr;
    cap_ = 0;
    const size_t want = std::max<size_t>(2 * total, size_t(1) << 16);
    CUDA_CHECK(cudaMallocHost(&host_, want * 4));
    CUDA_CHECK(cudaMalloc(&dev_, want * 4));
    cap_ = want;
  }
  int32_t* h = host_;
  int32_t max_pos = 0;
  for (int32_t p : plan.positions) max_pos = std::max(max_pos, p);
  h[0] = max_pos;
  h[1] = h[2] = h[3] = 0;
  std::memcpy(h + o_tok, plan.tokens.data(), T * 4);
  std::memcpy(h + o_pos, plan.positions.data(), T * 4);
  std::memcpy(h + o_seq_of, plan.row_seq.data(), T * 4);
  if (S) std::memcpy(h + o_seqs, plan.seqs.data(), S * sizeof(SeqStep));
  if (R) std::memcpy(h + o_logit, plan.logit_rows.data(), R * 4);
  if (B) std::memcpy(h + o_tables, plan.block_tables.data(), B * 4);
  CUDA_CHECK(cudaMemcpyAsync(dev_, h, total * 4, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(copied_, stream));
  logit_rows_ = plan.logit_rows;
  const int32_t* d = static_cast<const int32_t*>(dev_);
  StepView v;
  v.max_position = d;
  v.tokens = d + o_tok;
  v.positions = d + o_pos;
  v.row_seq = d + o_seq_of;
  v.seqs = reinterpret_cast<const SeqStep*>(d + o_seqs);
  v.logit_rows = d + o_logit;
  v.block_tables = d + o_tables;
  v.n_rows = int32_t(T);
  v.n_seqs = int32_t(S);
  v.block_size = plan.block_size;
  return v;
}

GraphCache::~GraphCache() {
  for (Entry& e : entries_) cudaGraphExecDestroy(e.exec);
}

cudaGraphExec_t GraphCache::find(const StepGraphKey& key, const Shape& shape, uint64_t epoch, int32_t max_position) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (!(e.key == key)) continue;
    if (e.epoch == epoch && e.shape == shape && max_position <= e.position_limit) return e.exec;
    // stale: device memory moved since, another shape, or positions past what its launches cover
    CUDA_CHECK(cudaGraphExecDestroy(e.exec));
    entries_.erase(entries_.begin() + long(i));
    return nullptr;
  }
  return nullptr;
}

void GraphCache::add(const StepGraphKey& key, const Shape& shape, uint64_t epoch, int32_t position_limit,
                     cudaGraphExec_t exec) {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].key == key) {
      CUDA_CHECK(cudaGraphExecDestroy(entries_[i].exec));
      entries_.erase(entries_.begin() + long(i));
      break;
    }
  }
  entries_.push_back({key, shape, epoch, position_limit, exec});
}

void GraphCache::drop(const void* owner) {
  for (size_t i = 0; i < entries_.size();) {
    if (entries_[i].key.owner == owner) {
      cudaGraphExecDestroy(entries_[i].exec);
      entries_.erase(entries_.begin() + long(i));
    } else {
      ++i;
    }
  }
}

}  // namespace kestrel::cuda

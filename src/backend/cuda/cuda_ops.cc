#include "backend/cuda/cuda_ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/block_gemv_geometry.h"
#include "backend/cuda/context.h"
#include "backend/cuda/step_graphs.h"

namespace kestrel {
namespace cuda {

void cuda_failed(cudaError_t err, const char* expr, const char* file, int line) {
  fail(ErrorKind::kInternal, "CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") in ", expr,
       " at ", file, ":", line);
}

void cublas_failed(cublasStatus_t st, const char* expr, const char* file, int line) {
  fail(ErrorKind::kInternal, "cuBLAS error ", cublasGetStatusName(st), " (", cublasGetStatusString(st), ") in ",
       expr, " at ", file, ":", line);
}

void GraphGuard::check(const char* what) const {
  if (capturing) unsupported("CUDA graph capture: ", what, " needs the host inside the step");
}

Scratch::~Scratch() {
  for (void* p : ptr_) {
    if (p) cudaFree(p);  // no throwing from a destructor
  }
}

void* Scratch::get(int slot, size_t bytes) {
  KCHECK(slot >= 0);
  if (size_t(slot) >= ptr_.size()) {
    ptr_.resize(size_t(slot) + 1, nullptr);
    size_.resize(size_t(slot) + 1, 0);
  }
  if (size_[size_t(slot)] < bytes) {
    guard_.check("growing a scratch slot");
    guard_.epoch.fetch_add(1);  // graphs recorded with the old slot read freed memory now
    if (ptr_[size_t(slot)]) CUDA_CHECK(cudaFree(ptr_[size_t(slot)]));  // synchronizes: in-flight users finish
    ptr_[size_t(slot)] = nullptr;
    size_[size_t(slot)] = 0;
    const size_t want = std::max<size_t>(bytes + bytes / 2, 4096);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, want);
    if (err != cudaSuccess) {
      cudaGetLastError();
      fail(ErrorKind::kOutOfMemory, "CUDA scratch: cannot allocate ", want, " bytes of device memory (",
           cudaGetErrorString(err), ")");
    }
    ptr_[size_t(slot)] = p;
    size_[size_t(slot)] = want;
  }
  return ptr_[size_t(slot)];
}

void* Scratch::get_zeroed(int slot, size_t bytes, cudaStream_t stream) {
  const size_t before = size_t(slot) < size_.size() ? size_[size_t(slot)] : 0;
  void* p = get(slot, bytes);
  if (size_[size_t(slot)] != before) CUDA_CHECK(cudaMemsetAsync(p, 0, size_[size_t(slot)], stream));  // made now
  return p;
}

PointerTables::~PointerTables() {
  for (auto& [key, e] : entries_) {
    if (e.dev) cudaFree(e.dev);
  }
}

const void* const* PointerTables::get(const std::vector<const void*>& ptrs, cudaStream_t stream) {
  KCHECK(!ptrs.empty());
  auto it = entries_.find(ptrs[0]);
  if (it != entries_.end() && it->second.host == ptrs) return static_cast<const void* const*>(it->second.dev);
  guard_.check("uploading a pointer table (MoE experts, n-gram table shards)");
  if (it == entries_.end()) it = entries_.emplace(ptrs[0], Entry{}).first;
  Entry& e = it->second;
  if (e.dev && e.host.size() < ptrs.size()) {
    guard_.epoch.fetch_add(1);
    CUDA_CHECK(cudaFree(e.dev));
    e.dev = nullptr;
  }
  if (!e.dev) CUDA_CHECK(cudaMalloc(&e.dev, ptrs.size() * sizeof(void*)));
  e.host = ptrs;
  CUDA_CHECK(cudaMemcpyAsync(e.dev, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return static_cast<const void* const*>(e.dev);
}

void* Context::upload_scratch(int slot, const void* host, size_t bytes) const {
  guard->check("uploading a host index array (gather_rows / embed_rows)");
  void* d = scratch->get(slot, bytes);
  // Pageable source: the call returns once the bytes are staged, so `host` may change after it.
  if (bytes) CUDA_CHECK(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, stream));
  return d;
}

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

int64_t gemv_deep_max_blocks() {
  static const int64_t n = [] {
    const char* v = std::getenv("KESTREL_CUDA_GEMV_DEEP_BLOCKS");
    return v && *v ? std::max<int64_t>(0, std::atoll(v)) : int64_t(sm_count());
  }();
  return n;
}

}  // namespace cuda

struct CudaOps::Impl {
  // Shared with the deleters of the buffers alloc hands out (they may outlive the backend).
  std::shared_ptr<cuda::GraphGuard> guard = std::make_shared<cuda::GraphGuard>();
  int device = 0;
  cuda::Context ctx;
  cuda::Scratch scratch{*guard};
  cuda::PointerTables tables{*guard};
  cuda::PlanBuffer plan{*guard};
  cuda::GraphCache graphs;
  bool graphs_on = true;
  // The open capture: its key, the shape of the plan begin_capture uploaded, the epoch then.
  StepGraphKey capture_key;
  cuda::GraphCache::Shape capture_shape;
  size_t capture_tables = 0;
  uint64_t capture_epoch = 0;
};

int CudaOps::device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace cuda {
bool pdl_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("KESTREL_CUDA_PDL");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return on;
}
}  // namespace cuda

CudaOps::CudaOps(int device) : impl_(std::make_unique<Impl>()) {
  if (device_count() <= device) unsupported("--device cuda: no CUDA device found");
  impl_->device = device;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->ctx.stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&impl_->ctx.cublas));
  CUBLAS_CHECK(cublasSetStream(impl_->ctx.cublas, impl_->ctx.stream));
  // The default math mode keeps at least the requested precision: F32 GEMMs never drop to TF32
  // (BF16 GEMMs still use the tensor cores with F32 accumulation).
  CUBLAS_CHECK(cublasSetMathMode(impl_->ctx.cublas, CUBLAS_DEFAULT_MATH));
  impl_->ctx.scratch = &impl_->scratch;
  impl_->ctx.tables = &impl_->tables;
  impl_->ctx.guard = impl_->guard.get();
  const char* env = std::getenv("KESTREL_CUDA_GRAPHS");
  impl_->graphs_on = !(env && std::strcmp(env, "0") == 0);
}

CudaOps::~CudaOps() {
  if (!impl_) return;
  abort_capture();
  cudaStreamSynchronize(impl_->ctx.stream);
  if (impl_->ctx.cublas) cublasDestroy(impl_->ctx.cublas);
  if (impl_->ctx.stream) cudaStreamDestroy(impl_->ctx.stream);
}

const cuda::Context& CudaOps::ctx() const { return impl_->ctx; }

namespace {

// Events on the stream: a mark is the moment the device reaches it.
class EventTimer final : public OpTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {}
  ~EventTimer() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  int mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e;
      CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
    return int(used_++);
  }
  std::vector<double> take() override {
    std::vector<double> t(used_, 0.0);
    if (used_ > 0) CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
    for (size_t i = 1; i < used_; ++i) {
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, events_[0], events_[i]));
      t[i] = double(ms) / 1e3;
    }
    used_ = 0;
    return t;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;
};

}  // namespace

std::string CudaOps::device_fault() const {
  const cudaError_t e = cudaStreamQuery(impl_->ctx.stream);
  if (e == cudaSuccess || e == cudaErrorNotReady) return {};
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

std::string CudaOps::device_name() const {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, impl_->device));
  return prop.name;
}

bool CudaOps::device_memory(uint64_t& free_bytes, uint64_t& total_bytes) const {
  size_t f = 0, t = 0;
  CUDA_CHECK(cudaMemGetInfo(&f, &t));
  free_bytes = f;
  total_bytes = t;
  return true;
}

std::unique_ptr<OpTimer> CudaOps::make_timer() { return std::make_unique<EventTimer>(impl_->ctx.stream); }

void CudaOps::synchronize() {
  impl_->guard->check("synchronize");
  CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream));
}

// Both change what a step queues: graphs recorded before are dropped (the epoch advances).
void CudaOps::set_matmul_precision(MatmulPrecision p) {
  impl_->ctx.matmul_precision = p;
  impl_->guard->epoch.fetch_add(1);
}
MatmulPrecision CudaOps::matmul_precision() const { return impl_->ctx.matmul_precision; }
void CudaOps::set_deterministic(bool on) {
  impl_->ctx.deterministic = on;
  impl_->guard->epoch.fetch_add(1);
}
bool CudaOps::deterministic() const { return impl_->ctx.deterministic; }

const char* matmul_precision_name(MatmulPrecision p) {
  switch (p) {
    case MatmulPrecision::kBf16: return "bf16";
    case MatmulPrecision::kBf16x2: return "bf16x2";
    case MatmulPrecision::kBf16x3: return "bf16x3";
    case MatmulPrecision::kExact: return "exact";
  }
  return "?";
}

bool CudaOps::supports_weight_dtype(DType dtype) const {
  switch (dtype) {
    case DType::kBF16: case DType::kF16: case DType::kF32:
    case DType::kQ8_0: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K:
    case DType::kQ6_K: case DType::kMXFP4:
      return true;
    default:
      return false;
  }
}

Buffer CudaOps::alloc(DType dtype, int64_t rows, int64_t cols) {
  KCHECK(rows >= 0 && cols >= 0);
  impl_->guard->check("allocating device memory");
  const size_t bytes = size_t(rows) * dtype_row_bytes(dtype, cols);
  void* p = nullptr;
  if (bytes) {
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      fail(ErrorKind::kOutOfMemory, "CUDA: cannot allocate ", bytes, " bytes for a [", rows, ", ", cols, "] ",
           dtype_name(dtype), " tensor (", cudaGetErrorString(err), ")");
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, impl_->ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream));
  }
  Tensor t{.dtype = dtype, .device = Device::kCuda, .data = p, .rows = rows, .cols = cols};
  // Freeing advances the graph epoch: a recorded graph may reference this memory.
  return Buffer(t, [guard = impl_->guard](void* q) {
    guard->epoch.fetch_add(1);
    cudaFree(q);
  });
}

Buffer CudaOps::upload(const Tensor& host) {
  KCHECK(host.device == Device::kCpu);
  impl_->guard->check("uploading a tensor");
  Buffer b = alloc(host.dtype, host.rows, host.cols);
  if (host.nbytes()) {
    CUDA_CHECK(cudaMemcpyAsync(b.view().data, host.data, host.nbytes(), cudaMemcpyHostToDevice, impl_->ctx.stream));
    CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream));
  }
  return b;
}

Buffer CudaOps::upload_matrix(const Tensor& host) {
  KCHECK(host.device == Device::kCpu);
  // KESTREL_CUDA_Q4K_INT=0 keeps Q4_K matrices row-major (the copy-engine GEMV),
  // KESTREL_CUDA_Q8_0_INT=0 Q8_0 ones (the unit GEMV) and KESTREL_CUDA_Q6K_INT=0 Q6_K ones (the
  // copy-engine or unit GEMV), to compare
  static const auto off = [](const char* name) {
    const char* v = std::getenv(name);
    return v && v[0] == '0';
  };
  static const bool q4k = !off("KESTREL_CUDA_Q4K_INT"), q8 = !off("KESTREL_CUDA_Q8_0_INT"),
                    q6k = !off("KESTREL_CUDA_Q6K_INT");
  // (Q6_K: rows a multiple of 8, so that a partial last group's tile keeps its chunks aligned)
  const bool tile = host.nbytes() != 0 && host.cols % q4k_int::kSuperElems == 0 &&
                    ((host.dtype == DType::kQ4_K && q4k) || (host.dtype == DType::kQ8_0 && q8) ||
                     (host.dtype == DType::kQ6_K && q6k && host.rows % 8 == 0));
  if (!tile) return upload(host);
  const int64_t N = host.rows, S = host.cols / q4k_int::kSuperElems;
  std::vector<uint8_t> t32(host.nbytes());
  const auto* src = static_cast<const uint8_t*>(host.data);
  Tensor t = host;
  if (host.dtype == DType::kQ4_K) {
    q4k_int::to_tile_layout(src, N, S, t32.data());
    t.dtype = DType::kQ4_K_T32;
  } else if (host.dtype == DType::kQ6_K) {
    q4k_int::to_q6_tile_layout(src, N, S, t32.data());
    t.dtype = DType::kQ6_K_T32;
  } else {
    q4k_int::to_q8_tile_layout(src, N, S, t32.data());
    t.dtype = DType::kQ8_0_T32;
  }
  t.data = t32.data();
  return upload(t);
}

void CudaOps::to_host(const Tensor& src, void* dst) {
  KCHECK(src.device == Device::kCuda);
  impl_->guard->check("copying to the host");
  if (!src.nbytes()) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, impl_->ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(impl_->ctx.stream));
}

void CudaOps::zero(const Tensor& t) {
  if (t.nbytes()) CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), impl_->ctx.stream));
}

void CudaOps::zero_rows(const Tensor& t, int64_t row) {
  KCHECK(row >= 0 && row < t.rows);
  const size_t row_bytes = size_t(t.cols) * dtype_size(t.dtype);
  CUDA_CHECK(cudaMemsetAsync(static_cast<uint8_t*>(t.data) + size_t(row) * row_bytes, 0, row_bytes,
                             impl_->ctx.stream));
}

void CudaOps::copy_rows(const Tensor& dst, int64_t dst_row, const Tensor& src, int64_t src_row, int64_t n) {
  KCHECK(dst.cols == src.cols && dst.dtype == src.dtype && dst_row + n <= dst.rows && src_row + n <= src.rows);
  const size_t row_bytes = size_t(dst.cols) * dtype_size(dst.dtype);
  CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(dst.data) + size_t(dst_row) * row_bytes,
                             static_cast<const uint8_t*>(src.data) + size_t(src_row) * row_bytes, size_t(n) * row_bytes,
                             cudaMemcpyDeviceToDevice, impl_->ctx.stream));
}

void CudaOps::begin_step(const StepPlan& plan) {
  if (impl_->guard->capturing) {
    // begin_capture uploaded this step's plan before the capture opened: the graph reads the
    // arrays at their addresses, and each replay uploads the next step's plan there first.
    const cuda::GraphCache::Shape shape{plan.n_rows(), int32_t(plan.seqs.size()), int32_t(plan.logit_rows.size())};
    KCHECK_MSG(shape == impl_->capture_shape && plan.block_tables.size() == impl_->capture_tables,
               "CUDA graph capture: the forward pass began a step other than the one begin_capture uploaded");
    return;
  }
  impl_->ctx.step = impl_->plan.upload(plan, impl_->ctx.stream);
}

// ---- step graphs ----

void CudaOps::set_step_graphs(bool on) { impl_->graphs_on = on; }

std::string CudaOps::graphs_off_reason() const {
  if (!impl_->graphs_on) return "switched off (KESTREL_CUDA_GRAPHS=0)";
  return {};
}

bool CudaOps::replay_step(const StepGraphKey& key, const StepPlan& plan) {
  if (!graphs_off_reason().empty()) return false;
  const cuda::GraphCache::Shape shape{plan.n_rows(), int32_t(plan.seqs.size()), int32_t(plan.logit_rows.size())};
  int32_t max_position = 0;
  for (int32_t p : plan.positions) max_position = std::max(max_position, p);
  if (!impl_->graphs.find(key, shape, impl_->guard->epoch.load(), max_position)) return false;
  begin_step(plan);  // may grow the plan buffer, which makes the graph stale: look again
  cudaGraphExec_t exec = impl_->graphs.find(key, shape, impl_->guard->epoch.load(), max_position);
  if (!exec) return false;
  CUDA_CHECK(cudaGraphLaunch(exec, impl_->ctx.stream));
  return true;
}

void CudaOps::begin_capture(const StepGraphKey& key, const StepPlan& plan) {
  KCHECK_MSG(graphs_off_reason().empty(), "CUDA graph capture while graphs are off");
  KCHECK_MSG(!impl_->guard->capturing, "CUDA graph capture: a capture is already open");
  begin_step(plan);
  impl_->capture_key = key;
  impl_->capture_shape = {plan.n_rows(), int32_t(plan.seqs.size()), int32_t(plan.logit_rows.size())};
  impl_->capture_tables = plan.block_tables.size();
  impl_->capture_epoch = impl_->guard->epoch.load();
  impl_->guard->position_limit = INT32_MAX;
  // Relaxed: cuBLAS may allocate its workspace; our own host-side needs are refused by the guard.
  CUDA_CHECK(cudaStreamBeginCapture(impl_->ctx.stream, cudaStreamCaptureModeRelaxed));
  impl_->guard->capturing = true;
}

std::string CudaOps::end_capture() {
  KCHECK_MSG(impl_->guard->capturing, "CUDA graph capture: end_capture without begin_capture");
  impl_->guard->capturing = false;
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(impl_->ctx.stream, &graph);
  if (err != cudaSuccess || !graph) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    return std::string("capture failed: ") + cudaGetErrorString(err);
  }
  if (impl_->guard->epoch.load() != impl_->capture_epoch) {
    CUDA_CHECK(cudaGraphDestroy(graph));
    return "device memory was freed or moved during the capture";
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  CUDA_CHECK(cudaGraphDestroy(graph));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("instantiating the graph failed: ") + cudaGetErrorString(err);
  }
  impl_->graphs.add(impl_->capture_key, impl_->capture_shape, impl_->capture_epoch, impl_->guard->position_limit,
                    exec);
  CUDA_CHECK(cudaGraphLaunch(exec, impl_->ctx.stream));
  return {};
}

void CudaOps::abort_capture() {
  if (!impl_->guard->capturing) return;
  impl_->guard->capturing = false;
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(impl_->ctx.stream, &graph);  // no throwing: an exception is on its way
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
}

void CudaOps::drop_graphs(const void* owner) { impl_->graphs.drop(owner); }

void CudaOps::embed(const Tensor& out, const Tensor& table, const StepPlan& plan, double scale) {
  cuda::embed(ctx(), out, table, plan, scale);
}
void CudaOps::rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, float eps) {
  cuda::rms_norm(ctx(), out, x, w, eps);
}
void CudaOps::embed_rms_norm(const Tensor& x, const Tensor& out, const Tensor& table, const StepPlan& plan,
                             double scale, const Tensor& w, float eps) {
  if (!cuda::embed_rms_norm(ctx(), x, out, table, plan, float(scale), w, eps))
    Ops::embed_rms_norm(x, out, table, plan, scale, w, eps);  // the two launches
}
void CudaOps::head_rms_norm(const Tensor& x, const Tensor& w, int head_dim, float eps) {
  cuda::head_rms_norm(ctx(), x, w, head_dim, eps);
}
void CudaOps::add(const Tensor& out, const Tensor& a, const Tensor& b) { cuda::add(ctx(), out, a, b); }
void CudaOps::add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, const Tensor& out,
                           float eps) {
  cuda::add_rms_norm(ctx(), residual, x, w, out, eps);
}
void CudaOps::mul_sigmoid(const Tensor& x, const Tensor& gate) { cuda::mul_sigmoid(ctx(), x, gate); }
void CudaOps::add_mul_sigmoid(const Tensor& out, const Tensor& x, const Tensor& gate) {
  cuda::add_mul_sigmoid(ctx(), out, x, gate);
}
void CudaOps::silu_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  cuda::silu_mul(ctx(), out, gate, up);
}
void CudaOps::gelu_tanh_mul(const Tensor& out, const Tensor& gate, const Tensor& up) {
  cuda::gelu_tanh_mul(ctx(), out, gate, up);
}
void CudaOps::scale(const Tensor& x, double s) { cuda::scale(ctx(), x, float(s)); }
void CudaOps::slice_cols(const Tensor& out, const Tensor& x, int64_t begin) { cuda::slice_cols(ctx(), out, x, begin); }
void CudaOps::gather_rows(const Tensor& out, const Tensor& x, const std::vector<int32_t>& rows) {
  // The step's logit rows (the output head's gather) are on the device already.
  const bool step_rows = !rows.empty() && rows == impl_->plan.logit_rows();
  cuda::gather_rows(ctx(), out, x, rows, step_rows ? impl_->ctx.step.logit_rows : nullptr);
}
void CudaOps::softcap(const Tensor& x, float cap) { cuda::softcap(ctx(), x, cap); }
void CudaOps::argmax(const Tensor& ids, const Tensor& x) { cuda::argmax(ctx(), ids, x); }
void CudaOps::sample_candidates(const Tensor& ids, const Tensor& scaled, const Tensor& mass, const Tensor& x,
                                std::span<const float> temperatures) {
  cuda::sample_candidates(ctx(), ids, scaled, mass, x, temperatures);
}
void CudaOps::activation(const Tensor& x, Activation act) { cuda::activation(ctx(), x, act); }
void CudaOps::mul(const Tensor& out, const Tensor& a, const Tensor& b) { cuda::mul(ctx(), out, a, b); }
void CudaOps::group_rms_norm(const Tensor& out, const Tensor& x, const Tensor& w, int group, float eps) {
  cuda::group_rms_norm(ctx(), out, x, w, group, eps);
}
void CudaOps::embed_rows(const Tensor& out, const std::vector<Tensor>& shards, const std::vector<int32_t>& ids) {
  cuda::embed_rows(ctx(), out, shards, ids);
}
void CudaOps::token_windows(const Tensor& windows, const Tensor& context, int32_t eos, const StepPlan& plan) {
  cuda::token_windows(ctx(), windows, context, eos, plan);
}
void CudaOps::ngram_embed(const Tensor& out, const std::vector<Tensor>& shards, const Tensor& windows,
                          const Tensor& hash) {
  cuda::ngram_embed(ctx(), out, shards, windows, hash);
}
void CudaOps::streams_expand(const Tensor& out, const Tensor& y) { cuda::streams_expand(ctx(), out, y); }
void CudaOps::streams_mix(const Tensor& out, const Tensor& w, const Tensor& x) { cuda::streams_mix(ctx(), out, w, x); }
void CudaOps::streams_inject(const Tensor& x, const Tensor& y, const Tensor& w, bool accumulate) {
  cuda::streams_inject(ctx(), x, y, w, accumulate);
}
void CudaOps::stream_gate(const Tensor& g, const Tensor& a, const Tensor& b) { cuda::stream_gate(ctx(), g, a, b); }
void CudaOps::matmul(const Tensor& out, const Tensor& x, const Tensor& w) { cuda::matmul(ctx(), out, x, w); }
void CudaOps::matmul_gated(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w, Activation act) {
  cuda::matmul_gated(ctx(), out, gate, up, w, act);
}
void CudaOps::matmul_gated_and_route(const Tensor& out, const Tensor& gate, const Tensor& up, const Tensor& w,
                                     Activation act, const Tensor& ids, const Tensor& weights, const Tensor& logits,
                                     int top_k, bool norm_topk) {
  cuda::matmul_gated_and_route(ctx(), out, gate, up, w, act, ids, weights, logits, top_k, norm_topk);
}
void CudaOps::gated_mlp(const Tensor& y, const Tensor& x, const Tensor& gate, const Tensor& up, const Tensor& down,
                        Activation act, const Tensor& g, const Tensor& u) {
  cuda::gated_mlp(ctx(), y, x, gate, up, down, act, g, u);
}
void CudaOps::matmul_multi(const Tensor& x, std::span<const MatmulTarget> targets) {
  cuda::matmul_multi(ctx(), x, targets);
}
void CudaOps::qk_norm_rope(const Tensor& q, const Tensor& q_norm, const Tensor& k, const Tensor& k_norm,
                           int head_dim, float eps, const RopeConfig& rope_cfg, const StepPlan& plan) {
  if (!cuda::qk_norm_rope(ctx(), q, q_norm, k, k_norm, head_dim, eps, rope_cfg, plan))
    Ops::qk_norm_rope(q, q_norm, k, k_norm, head_dim, eps, rope_cfg, plan);
}
void CudaOps::norm_rope_attention(const Tensor& out, const Tensor& q, const Tensor& q_norm, const Tensor& k,
                                  const Tensor& k_norm, const Tensor& v, const Tensor& gate, float eps,
                                  const RopeConfig& rope_cfg, const KvLayerView& cache, const AttentionParams& p,
                                  const StepPlan& plan) {
  if (!cuda::norm_rope_attention(ctx(), out, q, q_norm, k, k_norm, v, gate, eps, rope_cfg, cache, p, plan))
    Ops::norm_rope_attention(out, q, q_norm, k, k_norm, v, gate, eps, rope_cfg, cache, p, plan);
}
void CudaOps::rope(const Tensor& x, int head_dim, const RopeConfig& rope, const StepPlan& plan) {
  cuda::rope(ctx(), x, head_dim, rope, plan);
}
void CudaOps::attention(const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const KvLayerView& cache, const AttentionParams& p, const StepPlan& plan) {
  cuda::attention(ctx(), out, q, k, v, cache, p, plan);
}
void CudaOps::kv_write(const KvLayerView& cache, const Tensor& k, const Tensor& v, const StepPlan& plan) {
  cuda::kv_write(ctx(), cache, k, v, plan);
}
void CudaOps::qsa_select(const Tensor& select, const Tensor& q, const Tensor& k, const Tensor& k_norm,
                         const KvLayerView& cache, const QsaParams& p, const StepPlan& plan) {
  cuda::qsa_select(ctx(), select, q, k, k_norm, cache, p, plan);
}
void CudaOps::dilated_conv1d_silu(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& state, int kernel,
                                  int dilation, const StepPlan& plan) {
  cuda::dilated_conv1d_silu(ctx(), out, x, w, state, kernel, dilation, plan);
}
void CudaOps::conv1d_silu(const Tensor& x, const Tensor& w, const StateLayerView& state, int kernel,
                          const StepPlan& plan) {
  cuda::conv1d_silu(ctx(), x, w, state, kernel, plan);
}
void CudaOps::gated_delta_rule(const Tensor& out, const Tensor& qkv, const Tensor& a, const Tensor& b,
                               const Tensor& a_neg, const Tensor& dt_bias, const StateLayerView& state,
                               const DeltaNetConfig& cfg, const StepPlan& plan) {
  cuda::gated_delta_rule(ctx(), out, qkv, a, b, a_neg, dt_bias, state, cfg, plan);
}
void CudaOps::gated_rms_norm(const Tensor& x, const Tensor& z, const Tensor& w, int head_dim, float eps) {
  cuda::gated_rms_norm(ctx(), x, z, w, head_dim, eps);
}
void CudaOps::deltanet_recurrence(const Tensor& out, const Tensor& qkv, const Tensor& z, const Tensor& a,
                                  const Tensor& b, const Tensor& conv_w, const Tensor& a_neg, const Tensor& dt_bias,
                                  const Tensor& norm, float eps, const StateLayerView& state,
                                  const DeltaNetConfig& cfg, const StepPlan& plan) {
  if (!cuda::deltanet_recurrence(ctx(), out, qkv, z, a, b, conv_w, a_neg, dt_bias, norm, eps, state, cfg, plan))
    Ops::deltanet_recurrence(out, qkv, z, a, b, conv_w, a_neg, dt_bias, norm, eps, state, cfg, plan);
}
void CudaOps::moe_route(const Tensor& ids, const Tensor& weights, const Tensor& logits, int top_k, bool norm_topk) {
  cuda::moe_route(ctx(), ids, weights, logits, top_k, norm_topk);
}
void CudaOps::moe_experts(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                          const ExpertWeights& experts) {
  cuda::moe_experts(ctx(), out, x, ids, weights, experts);
}
void CudaOps::moe_experts_shared(const Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                 const ExpertWeights& experts, const Tensor& shared, const Tensor& shared_gate) {
  cuda::moe_experts(ctx(), out, x, ids, weights, experts, &shared, &shared_gate);
}

}  // namespace kestrel

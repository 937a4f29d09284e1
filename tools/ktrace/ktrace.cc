// libkestrel_ktrace.so: every kernel a process runs, with its device start and end, written as
// CSV, for finding where a replayed decode step's time goes. Nsight Systems is not on the GPU
// machine and Nsight Compute times each kernel alone (serialized, L2 flushed); this records the
// kernels as they run, inside CUDA graphs and under programmatic dependent launch, through
// CUPTI's activity API (CONCURRENT_KERNEL records, which do not serialize the kernels).
//
//   KTRACE_OUT=trace.csv LD_PRELOAD=build/libkestrel_ktrace.so build/kestrel bench ...
//
// Columns: start_ns, end_ns (device clock), graph_id, graph_node_id (0 outside a graph),
// stream, grid x*y*z blocks, threads a block, registers a thread, dynamic shared bytes, the
// kernel's name (demangled, without its parameter list). scripts/trace-step-sum.py sums a
// trace per kernel a step. The file is written under KTRACE_OUT.tmp and renamed at exit.
#include <cupti.h>
#include <cxxabi.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

namespace {

constexpr size_t kBufferBytes = size_t(8) << 20;

// Plain data only: the atexit handler runs after this file's static destructors may have.
std::mutex g_mutex;
FILE* g_file = nullptr;
char g_path[4096];
char g_tmp[sizeof g_path + 8];  // g_path + ".tmp", where the file is written until it is complete
size_t g_records = 0, g_dropped = 0;

void fail(const char* what, CUptiResult r) {
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "ktrace: %s failed: %s\n", what, msg ? msg : "unknown CUPTI error");
}

// The kernel's name as C++ spells it, cut at its parameter list (templates kept).
std::string short_name(const char* mangled) {
  if (!mangled) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  static constexpr std::string_view kAnon = "(anonymous namespace)::";
  for (size_t at; (at = s.find(kAnon)) != std::string::npos;) s.erase(at, kAnon.size());
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    else if (s[i] == '>') --depth;
    else if (s[i] == '(' && depth == 0) return s.substr(0, i);
  }
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    const std::string name = short_name(k->name);
    // Names go in quotes (templates hold commas), with any quote doubled.
    std::string quoted = "\"";
    for (char c : name) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    quoted += '"';
    if (g_file)
      std::fprintf(g_file, "%llu,%llu,%u,%llu,%u,%lld,%d,%u,%d,%s\n", (unsigned long long)k->start,
                   (unsigned long long)k->end, k->graphId, (unsigned long long)k->graphNodeId, k->streamId,
                   (long long)k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                   unsigned(k->registersPerThread), k->dynamicSharedMemory, quoted.c_str());
    ++g_records;
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS) g_dropped += dropped;
  std::free(buffer);
}

void finish() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_file) return;
  const bool ok = std::fflush(g_file) == 0;
  std::fclose(g_file);
  g_file = nullptr;
  if (!ok || std::rename(g_tmp, g_path) != 0) {
    std::fprintf(stderr, "ktrace: could not write %s\n", g_path);
    std::remove(g_tmp);
    return;
  }
  std::fprintf(stderr, "ktrace: %zu kernels written to %s%s\n", g_records, g_path,
               g_dropped ? " (some records were dropped: the trace is incomplete)" : "");
}

__attribute__((constructor)) void start() {
  const char* out = std::getenv("KTRACE_OUT");
  if (!out || !*out) {
    std::fprintf(stderr, "ktrace: KTRACE_OUT is not set; no trace is taken\n");
    return;
  }
  if (std::strlen(out) >= sizeof g_path) {
    std::fprintf(stderr, "ktrace: KTRACE_OUT is longer than %zu characters; no trace is taken\n", sizeof g_path - 1);
    return;
  }
  std::snprintf(g_path, sizeof g_path, "%s", out);
  std::snprintf(g_tmp, sizeof g_tmp, "%s.tmp", g_path);
  g_file = std::fopen(g_tmp, "w");
  if (!g_file) {
    std::fprintf(stderr, "ktrace: cannot open %s: %s\n", g_tmp, std::strerror(errno));
    return;
  }
  std::fprintf(g_file, "start_ns,end_ns,graph_id,graph_node_id,stream,blocks,threads,registers,dynamic_smem,name\n");
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) {
    fail("enabling kernel records", r);
    std::fclose(g_file);
    g_file = nullptr;
    std::remove(g_tmp);
    return;
  }
  // Records reach the file every 200 ms and at exit. The CUDA runtime registers its teardown
  // after this constructor, so that runs first; a context's records are delivered when it is
  // destroyed, and the final flush takes what is left.
  cuptiActivityFlushPeriod(200);
  std::atexit(finish);
}

}  // namespace

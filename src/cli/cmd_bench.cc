// kestrel bench: prompt-processing and token-generation speed, in the spirit of llama-bench.
//
// pp: one sequence prefills P tokens (in --chunk sized steps). tg: B sequences at context depth
// D decode N tokens each, one token per sequence per step. Each test repeats -r times; the
// table shows the median and the spread, the bytes each step must stream (the weights it reads,
// Model::weight_bytes_per_step, plus the KV and recurrent state), the bandwidth that implies, and
// that as a fraction of the machine's measured copy bandwidth — the roofline of a memory-bound
// decode.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/backend_select.h"
#include "cli/bench_util.h"
#include "cli/command.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/files.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "engine/runner.h"
#include "model/loader.h"
#include "cli/profile_print.h"
#include "ops/profiling_ops.h"

namespace kestrel::cli {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// Host copy bandwidth (bytes read + written per second), best of a few 256 MiB copies.
double measure_copy_bandwidth() {
  const size_t n = size_t(256) << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    auto t = clock_type::now();
    ThreadPool::global().parallel_for(int64_t(n / 4096), [&](int64_t p0, int64_t p1) {
      std::memcpy(b.data() + p0 * 4096, a.data() + p0 * 4096, size_t(p1 - p0) * 4096);
    });
    best = std::max(best, 2.0 * double(n) / seconds_since(t));
  }
  return best;
}

struct Stats {
  double median = 0, min = 0, max = 0;
};

// The shortest of 5 timed runs of `op` on the backend (after one warm-up), each waited for by a
// small blocking read of `done` (16 bytes that op writes last).
double best_seconds(Ops& ops, const Tensor& done, const std::function<void()>& op) {
  uint8_t probe[16];
  op();  // warm-up
  ops.to_host(done, probe);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t = clock_type::now();
    op();
    ops.to_host(done, probe);
    const double s = seconds_since(t);
    best = i == 0 ? s : std::min(best, s);
  }
  return best;
}

// The first 16 bytes of t's last row (a plain dtype; the row a multiple of 16 bytes).
Tensor last_16_bytes(const Tensor& t) {
  const int64_t elems = 16 * t.cols / int64_t(t.row_bytes());  // elements in 16 bytes
  return t.rows_slice(t.rows - 1, 1).reshaped(t.cols / elems, elems).rows_slice(0, 1);
}

// Device copy bandwidth through the backend: 1 GiB copied buffer to buffer, best of a few.
double measure_device_copy_bandwidth(Ops& ops) {
  const int64_t rows = 1024, cols = int64_t(1) << 20;  // 1 GiB of bytes
  Buffer a = ops.alloc(DType::kU8, rows, cols), b = ops.alloc(DType::kU8, rows, cols);
  return 2.0 * double(rows * cols) /
         best_seconds(ops, last_16_bytes(b.view()), [&] { ops.copy_rows(b.view(), 0, a.view(), 0, rows); });
}

// The backend's matmul op on one large product (bf16 weights, F32 activations, at the backend's
// matmul precision): the FLOP/s a prefill's matrix products are measured against (--profile).
// T x N x K = 4096 x 8192 x 4096 on a device, 64 x 1024 x 1024 on the CPU; best of a few.
struct MatmulCeiling {
  double flops = 0;  // per second
  int64_t t = 0, n = 0, k = 0;
};
MatmulCeiling measure_matmul_ceiling(Ops& ops) {
  const bool cpu = ops.device() == Device::kCpu;
  MatmulCeiling c{.t = cpu ? 64 : 4096, .n = cpu ? 1024 : 8192, .k = cpu ? 1024 : 4096};
  Buffer hw = host_buffer(DType::kBF16, c.n, c.k), hx = host_buffer(DType::kF32, c.t, c.k);
  for (int64_t i = 0; i < c.n * c.k; ++i) hw.view().as<uint16_t>()[i] = f32_to_bf16(float((i * 7919) % 2001 - 1000) * 1e-5f);
  for (int64_t i = 0; i < c.t * c.k; ++i) hx.view().f32()[i] = float((i * 104729) % 2001 - 1000) * 1e-3f;
  Buffer w = ops.upload(hw.view()), x = ops.upload(hx.view()), out = ops.alloc(DType::kF32, c.t, c.n);
  c.flops = 2.0 * double(c.t) * double(c.n) * double(c.k) /
            best_seconds(ops, last_16_bytes(out.view()), [&] { ops.matmul(out.view(), x.view(), w.view()); });
  return c;
}

Stats summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, int32_t(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

int bench_cmd(const Args& args) {
  const std::string dir = args.require("model");
  if (args.has("threads")) ThreadPool::set_global_threads(int(args.get_int("threads", 0, 1, 1024)));
  const auto pps = parse_int_list(args.get("p", "512"), "-p");
  const auto ns = parse_int_list(args.get("n", "128"), "-n");
  const auto batches = parse_int_list(args.get("b", "1"), "-b");
  const auto depths = parse_int_list(args.get("d", "0"), "-d");
  const int reps = int(args.get_int("r", 3, 1, 1000));
  const int chunk = int(args.get_int("chunk", 512, 1, 1 << 20));
  auto check_list = [](const std::vector<int64_t>& v, const char* flag, int64_t lo, int64_t hi) {
    for (int64_t x : v) {
      if (x < lo || x > hi) bad_input("option ", flag, ": ", x, " is out of range [", lo, ", ", hi, "]");
    }
  };
  check_list(pps, "-p", 0, 1 << 20);
  check_list(ns, "-n", 0, 1 << 20);
  check_list(batches, "-b", 1, 4096);
  check_list(depths, "-d", 0, 1 << 20);

  const BackendOptions bo = backend_options(args);
  auto backend = make_backend(bo);
  const bool profile = args.flag("profile");
  const bool queue_steps = args.flag("queue-steps");
  std::unique_ptr<ProfilingOps> profiler;
  Ops* ops = backend.get();
  if (profile) {
    profiler = std::make_unique<ProfilingOps>(*backend);
    ops = profiler.get();
  }
  LoadedModel lm = load_model(dir, *ops);
  const ModelConfig& cfg = lm.config();
  const double copy_bw =
      ops->device() == Device::kCpu ? measure_copy_bandwidth() : measure_device_copy_bandwidth(*backend);
  const CacheCosts costs = cache_costs(cfg, 16, dtype_size(ops->kv_cache_dtype()));
  std::mt19937 rng(1234);

  nlohmann::json results = nlohmann::json::array();
  const std::string device_name = ops->device_name();
  const std::string matmul_precision = matmul_precision_report(bo);  // empty on cpu
  const std::string kv_cache(dtype_name(ops->kv_cache_dtype()));
  std::printf("model: %s (%s, %s params, %s of weights), device %s (%s)%s%s, KV cache %s, %d threads\n", dir.c_str(),
              cfg.model_type.c_str(), human_count(double(lm.model->parameter_count())).c_str(),
              human_bytes(double(lm.model->weight_bytes())).c_str(), ops->name(), device_name.c_str(),
              bo.deterministic ? " (deterministic)" : "",
              matmul_precision.empty() ? "" : (", matmul precision " + matmul_precision).c_str(), kv_cache.c_str(),
              ThreadPool::global().size());
  std::printf("measured copy bandwidth: %.1f GB/s (the roofline below)\n", copy_bw / 1e9);
  if (queue_steps)
    std::printf("tg steps queued without reading back their tokens (--queue-steps): the host's turnaround between "
                "steps is off the chain\n");
  MatmulCeiling ceiling;
  if (profile) {
    ceiling = measure_matmul_ceiling(*backend);
    std::printf("measured matmul ceiling: %.4g TFLOP/s (the backend's matmul op, %ld x %ld x %ld, bf16 weights%s%s; "
                "the profiles' matrix products against it)\n",
                ceiling.flops / 1e12, long(ceiling.t), long(ceiling.n), long(ceiling.k),
                matmul_precision.empty() ? "" : ", precision ", matmul_precision.c_str());
  }
  if (const double step = lm.model->weight_bytes_per_step(1); step < double(lm.model->weight_bytes()))
    std::printf("weights a step reads: %s at batch 1 (embedding tables it gathers from count the rows gathered%s)\n",
                human_bytes(step).c_str(),
                cfg.has_moe() ? ", routed experts the ones its rows are expected to touch" : "");
  std::printf("\n");
  std::printf("%-14s %6s %12s %12s %12s %10s %9s\n", "test", "batch", "t/s", "min t/s", "max t/s", "GB/s", "roofline");

  struct Profiled {
    std::string test;
    int64_t batch;
    OpProfile profile;
  };
  std::vector<Profiled> profiled;  // printed after the table
  // Runs of a test: `reps` timed after one warm-up, then (with --profile) one recorded.
  const int runs = reps + 1 + (profile ? 1 : 0);
  auto recording = [&](int r) {
    const bool on = profile && r == reps + 1;
    if (on) {
      profiler->clear();
      profiler->set_recording(true);
    }
    return on;
  };
  auto finish_recording = [&](const std::string& test, int64_t batch) {
    profiler->set_recording(false);
    profiler->collect();
    profiled.push_back({test, batch, profiler->profile()});
  };
  auto report = [&](const std::string& test, int64_t batch, int64_t depth, std::vector<double> tps, double bytes_per_step,
                    double steps_per_sec_factor) {
    Stats s = summarize(tps);
    // bandwidth: bytes streamed per step x steps per second
    const double steps_per_sec = s.median / steps_per_sec_factor;
    const double bw = bytes_per_step * steps_per_sec;
    std::printf("%-14s %6ld %12.2f %12.2f %12.2f %10.2f %8.1f%%\n", test.c_str(), long(batch), s.median, s.min, s.max,
                bw / 1e9, 100.0 * bw / copy_bw);
    results.push_back({{"test", test}, {"batch", batch}, {"depth", depth}, {"tokens_per_s_median", s.median},
                       {"tokens_per_s_min", s.min}, {"tokens_per_s_max", s.max}, {"bytes_per_step", bytes_per_step},
                       {"achieved_GBps", bw / 1e9}, {"roofline_fraction", bw / copy_bw}, {"reps", reps}});
  };

  // Whether the decode steps of a timed run replayed CUDA graphs (engine/runner.h).
  auto report_graphs = [&](const GraphStats& g) {
    if (ops->device() == Device::kCpu) return;
    std::string line = g.off.empty() ? cat("on: ", g.replayed, " of ", g.replayed + g.recorded + g.eager,
                                           " decode steps replayed (", g.recorded, " recorded, ", g.eager, " eager)")
                                     : "off: " + g.off;
    if (!g.failure.empty()) line += "; capture failed: " + g.failure;
    std::printf("%-14s graphs %s\n", "", line.c_str());
    results.back()["graphs"] = {{"on", g.off.empty()}, {"replayed", g.replayed}, {"recorded", g.recorded},
                                {"eager", g.eager}, {"off", g.off}, {"failure", g.failure}};
  };

  for (int64_t P : pps) {
    if (P == 0) continue;
    std::vector<double> tps;
    for (int r = 0; r < runs; ++r) {  // the first run warms up
      Runner runner(*lm.model, cpu_cache_sizing(cfg, 1, P));
      SequenceState seq;
      runner.start(seq);
      auto prompt = random_tokens(P, cfg.vocab_size, rng);
      const bool rec = recording(r);
      auto t = clock_type::now();
      for (int64_t b = 0; b < P; b += chunk) {
        const int64_t n = std::min<int64_t>(chunk, P - b);
        runner.step({{.seq = &seq, .tokens = std::span<const int32_t>(prompt.data() + b, size_t(n)),
                      .no_logits = b + n < P}});
      }
      if (rec) finish_recording("pp" + std::to_string(P), 1);
      else if (r > 0) tps.push_back(double(P) / seconds_since(t));
    }
    // prefill streams the weights once per chunk
    const double steps = double((P + chunk - 1) / chunk);
    report("pp" + std::to_string(P), 1, 0, tps, lm.model->weight_bytes_per_step(std::min<int64_t>(P, chunk)),
           double(P) / steps);
  }
  for (int64_t N : ns) {
    if (N == 0) continue;
    for (int64_t B : batches) {
      for (int64_t D : depths) {
        std::vector<double> tps;
        GraphStats graphs;  // of the last timed run
        const std::string name = "tg" + std::to_string(N) + (D ? "@d" + std::to_string(D) : "");
        // One runner for every repetition, as a server keeps one: the step graphs its warm-up run
        // records replay in the timed runs (llama-bench likewise keeps its context across runs).
        // Each run starts fresh sequences (new blocks and zeroed state slots) and ends them.
        Runner runner(*lm.model, cpu_cache_sizing(cfg, int32_t(B), D + N + 1));
        for (int r = 0; r < runs; ++r) {
          std::vector<SequenceState> seqs(static_cast<size_t>(B));
          std::vector<std::vector<int32_t>> last(static_cast<size_t>(B));
          for (auto& s : seqs) runner.start(s);
          if (D > 0) {
            for (int64_t b = 0; b < B; ++b) {
              auto ctx = random_tokens(D, cfg.vocab_size, rng);
              for (int64_t c = 0; c < D; c += chunk) {
                const int64_t n = std::min<int64_t>(chunk, D - c);
                // The last chunk's logits come back, as a prompt's would: that copy waits for the
                // device, so the timed decode below does not also wait out the prefill's last
                // chunks (a backend queues a step or two ahead of the host).
                runner.step({{.seq = &seqs[size_t(b)], .tokens = std::span<const int32_t>(ctx.data() + c, size_t(n)),
                              .no_logits = c + n < D}});
              }
            }
          }
          for (auto& l : last) l = random_tokens(1, cfg.vocab_size, rng);
          const bool rec = recording(r);
          const GraphStats before = runner.graph_stats();
          auto t = clock_type::now();
          for (int64_t i = 0; i < N; ++i) {
            std::vector<StepItem> items;
            for (int64_t b = 0; b < B; ++b) items.push_back({.seq = &seqs[size_t(b)], .tokens = last[size_t(b)]});
            // greedy on the backend, so the next token depends on the logits; with --queue-steps
            // every step but the last is queued without waiting, each feeding the same tokens
            if (queue_steps && i + 1 < N) {
              runner.queue_step_argmax(items);
              continue;
            }
            const auto& ids = runner.step_argmax(items);
            for (int64_t b = 0; b < B; ++b) last[size_t(b)][0] = ids[size_t(b)];
          }
          if (rec) finish_recording(name, B);
          else if (r > 0) tps.push_back(double(N * B) / seconds_since(t));
          if (r == reps) {  // this run's steps (the runner's counts are cumulative)
            graphs = runner.graph_stats();
            graphs.replayed -= before.replayed;
            graphs.recorded -= before.recorded;
            graphs.eager -= before.eager;
          }
          for (auto& s : seqs) runner.finish(s);
        }
        // per step: the weights a step reads, plus each sequence's KV (depth + N/2 on average) and state
        const double kv = double(costs.bytes_per_block) / 16.0 * double(D + N / 2) * double(B);
        const double state = 2.0 * double(costs.bytes_per_slot) * double(B);
        report(name, B, D, tps, lm.model->weight_bytes_per_step(B) + kv + state, double(B));
        report_graphs(graphs);
      }
    }
  }

  nlohmann::json profiles = nlohmann::json::array();
  if (!profiled.empty()) std::printf("\nphase profile (%s time per step, one recorded run after the timed ones):\n",
                                     ops->device() == Device::kCpu ? "wall" : "device");
  for (const auto& p : profiled) {
    nlohmann::json j = print_profile(stdout, cat(p.test, ", batch ", p.batch), p.profile, ceiling.flops);
    j["test"] = p.test;
    j["batch"] = p.batch;
    profiles.push_back(j);
  }

  const std::string date = now_utc();
  nlohmann::json doc = {{"model", dir}, {"model_type", cfg.model_type}, {"device", ops->name()},
                        {"device_name", device_name},
                        {"deterministic", bo.deterministic}, {"queue_steps", queue_steps},
                        {"matmul_precision",  // null on cpu
                         matmul_precision.empty() ? nlohmann::json() : nlohmann::json(matmul_precision)},
                        {"kv_cache", kv_cache},
                        {"threads", ThreadPool::global().size()}, {"copy_bandwidth_GBps", copy_bw / 1e9},
                        {"params", lm.model->parameter_count()}, {"weight_bytes", lm.model->weight_bytes()},
                        {"date", date}, {"command", args.get("command-line", "")}, {"results", results}};
  if (profile) {
    doc["profiles"] = profiles;
    doc["matmul_ceiling_TFLOPs"] = ceiling.flops / 1e12;
    doc["matmul_ceiling_shape"] = {ceiling.t, ceiling.n, ceiling.k};
  }
  const std::string out = args.get("json", "");
  if (!out.empty()) {
    write_file_atomic(out, doc.dump(1) + "\n");
    std::printf("\nwrote %s\n", out.c_str());
  }
  return 0;
}

const Registrar kReg{{
    .name = "bench",
    .summary = "measure prompt processing and token generation speed",
    .usage = "kestrel bench -m DIR|FILE.gguf [-p 512,8192] [-n 128] [-b 1,8] [-d 0,8192] [-r 3] [--profile] "
             "[--device cpu|cuda] [--matmul-precision bf16x3|bf16x2|bf16|exact] [--kv-cache f32|bf16] "
             "[--deterministic] [--queue-steps] [--json FILE]",
    .details = "pp<P>: prefill of P tokens; tg<N>: N decode steps of B sequences at context depth D (the depth\n"
               "is prefilled first, untimed). The tg runs of a test share one runner, so the CUDA step graphs\n"
               "its warm-up run records replay in the timed runs, as in a server.\n"
               "Reports the median tokens/s over -r repetitions (after one warm-up), its spread, and the\n"
               "achieved memory bandwidth (the weights a step reads + KV + recurrent state: of a table a step\n"
               "only gathers from, as an untied token embedding, the rows gathered; of mixture-of-experts\n"
               "layers the experts a step is expected to touch) against the measured copy bandwidth.\n"
               "--profile adds one recorded run of each test and prints its time per step by phase\n"
               "(embedding, attention, deltanet, mlp/moe, head, other) and by op, and the time between ops\n"
               "(host work the device waited for); device events time it on the GPU. It also gives the matrix\n"
               "products' FLOPs per step and rate (over the matmul and moe_experts ops' own time) as a fraction\n"
               "of a matmul ceiling measured first: the backend's matmul op on one large product (4096 x 8192 x\n"
               "4096 on a device, 64 x 1024 x 1024 on the CPU, bf16 weights, at the run's precision). Greedy decoding picks\n"
               "each token on the backend (no logits come back). --deterministic measures the batch-invariant\n"
               "kernels (compare with a run without it for what the mode costs). --matmul-precision measures\n"
               "prefill at another precision of the CUDA matmuls and attention; on cuda the header and the JSON\n"
               "record the precision the run computed with (exact under --deterministic; null on cpu).\n"
               "--queue-steps queues each tg step on the backend without waiting for its tokens (every step\n"
               "feeds the same ones; only the last is read back): the device's time per step with the host's\n"
               "turnaround between steps (the read back, the next plan, the launch) off the chain. The gap to a\n"
               "run without it is what that turnaround costs.",
    .options = {{"model", "m", "DIR", "model directory, or a .gguf file"},
                {"p", "p", "LIST", "prompt lengths for pp tests (0 = none)", "512"},
                {"n", "n", "LIST", "tokens per tg test (0 = none)", "128"},
                {"b", "b", "LIST", "batch sizes (sequences decoding together)", "1"},
                {"d", "d", "LIST", "context depths for tg tests", "0"},
                {"r", "r", "N", "repetitions", "3"},
                {"chunk", "", "N", "prefill tokens per step", "512"},
                {"json", "", "FILE", "also write the results as JSON (with the device's name, the command and the date)"},
                {"profile", "", "", "print a phase profile of each test (one extra recorded run)"},
                {"command-line", "", "TEXT", "command recorded in the JSON"},
                {"threads", "t", "N", "CPU threads", "all cores"},
                {"device", "", "cpu|cuda", "backend", "cpu"},
                {"kv-cache", "", "f32|bf16", kKvCacheHelp, kKvCacheDefault},
                {"matmul-precision", "", "bf16x3|bf16x2|bf16|exact", kMatmulPrecisionHelp, "bf16x3"},
                {"deterministic", "", "", kDeterministicHelp},
                {"queue-steps", "", "", "tg steps queue on the backend without reading back their tokens"}},
    .run = bench_cmd,
}};

}  // namespace
}  // namespace kestrel::cli

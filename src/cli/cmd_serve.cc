// kestrel serve: the OpenAI-compatible HTTP server.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "cache/memory_plan.h"
#include "cli/backend_select.h"
#include "cli/command.h"
#include "cli/profile_print.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "server/server.h"

namespace kestrel::cli {
namespace {

int serve_cmd(const Args& args) {
  // SIGTERM / SIGINT are taken by a watcher thread; block them in this thread before any other
  // thread (CPU workers, HTTP workers) is created, so every thread inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const std::string dir = args.require("model");
  server::ServerOptions so;
  so.host = args.get("host", "127.0.0.1");
  so.port = int(args.get_int("port", 8080, 0, 65535));
  so.api_key = args.get("api-key", "");
  so.cors_origin = args.get("cors-origin", "");
  so.max_body_bytes = size_t(args.get_int("max-body-bytes", 8 << 20, 1024, int64_t(1) << 32));
  so.max_concurrent = int(args.get_int("max-concurrent", 64, 1, 100000));
  so.drain_seconds = args.get_double("drain-timeout", 30.0, 0.0, 86400.0);
  so.limits.max_prompt_tokens = args.get_int("max-prompt-tokens", 32768, 1, int64_t(1) << 30);
  so.limits.max_tokens = int(args.get_int("max-tokens-limit", 4096, 1, 1 << 24));
  so.limits.default_max_tokens = int(std::min<int64_t>(so.limits.max_tokens, 256));
  so.limits.max_n = int(args.get_int("max-n", 8, 1, 128));
  server::ServeOptions mo;
  const BackendOptions bo = backend_options(args);  // refuses a bad --matmul-precision before loading
  mo.device = bo.device;
  mo.matmul_precision = bo.matmul_precision;
  mo.kv_cache = bo.kv_cache;
  mo.name = args.get("served-model-name", "");
  mo.max_running = int32_t(args.get_int("max-running", 16, 1, 4096));
  mo.max_context = args.get_int("ctx", 8192, 16, int64_t(1) << 24);
  mo.max_step_tokens = int32_t(args.get_int("step-tokens", 512, 1, 1 << 20));
  mo.gpu_memory = args.get("gpu-memory", "");
  if (!mo.gpu_memory.empty()) {  // refuse a bad value before loading
    parse_memory_limit(mo.gpu_memory, "--gpu-memory");
    if (mo.device != "cuda") bad_input("--gpu-memory needs --device cuda (the ", mo.device, " backend has no device memory to plan)");
  }
  mo.prefix_cache = !args.flag("no-prefix-cache");
  mo.deterministic = bo.deterministic;
  if (mo.deterministic && mo.max_step_tokens < 64)
    bad_input("--deterministic needs --step-tokens of at least 64 (prompt chunks end on the 64-token grid), got ",
              mo.max_step_tokens);
  mo.profile = args.flag("profile");
  mo.sample_candidates = int32_t(args.get_int("sample-candidates", -1, -1, Runner::kMaxSampleCandidates));
  if (args.has("threads")) ThreadPool::set_global_threads(int(args.get_int("threads", 0, 1, 1024)));
  so.limits.max_prompt_tokens = std::min<int64_t>(so.limits.max_prompt_tokens, mo.max_context - 1);

  server::Server srv(so);
  const int port = srv.bind();
  std::fprintf(stderr, "kestrel serve: listening on http://%s:%d (loading %s)\n", so.host.c_str(), port, dir.c_str());
  std::thread http([&] { srv.listen(); });
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "kestrel serve: signal %d: draining in-flight requests (up to %.0f s)\n", sig, so.drain_seconds);
    srv.stop();
  });
  int rc = 0;
  ProfilingOps* profiler = nullptr;
  try {
    auto model = server::load_served_model(dir, mo);
    profiler = model->profiler;
    std::fprintf(stderr, "kestrel serve: ready: model '%s'\n", model->name.c_str());
    srv.set_model(std::move(model));
  } catch (const Error& e) {
    std::fprintf(stderr, "kestrel serve: cannot load %s: %s\n", dir.c_str(), e.what());
    rc = 1;
    pthread_kill(watcher.native_handle(), SIGTERM);
  }
  http.join();
  watcher.join();
  if (profiler) {  // the scheduler has stopped: nothing runs on the backend any more
    profiler->set_recording(false);
    profiler->collect();
    std::fprintf(stderr, "kestrel serve: phase profile of the served steps:\n");
    print_profile(stderr, "every step", profiler->profile());
  }
  std::fprintf(stderr, "kestrel serve: stopped\n");
  return rc;
}

const Registrar kReg{{
    .name = "serve",
    .summary = "serve a model over an OpenAI-compatible HTTP API",
    .usage = "kestrel serve -m DIR [--host H] [--port P] [--api-key KEY] [--device cpu|cuda] "
             "[--matmul-precision bf16x3|bf16x2|bf16|exact] [--kv-cache f32|bf16] [--deterministic]",
    .details = "Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health\n"
               "(503 while loading), GET /metrics (Prometheus), POST /tokenize, POST /detokenize.\n"
               "SIGTERM/SIGINT stop accepting requests, drain those in flight (--drain-timeout), then exit.",
    .options = {{"model", "m", "DIR", "model directory (with tokenizer.json; chat template optional), or a .gguf file with tokenizer metadata"},
                {"host", "", "HOST", "address to listen on", "127.0.0.1"},
                {"port", "", "PORT", "port (0 = any free port)", "8080"},
                {"api-key", "", "KEY", "require 'Authorization: Bearer KEY' (not on /health)"},
                {"cors-origin", "", "ORIGIN", "send CORS headers allowing ORIGIN (e.g. *)"},
                {"served-model-name", "", "NAME", "model name in the API", "the directory name"},
                {"max-running", "", "N", "sequences batched together", "16"},
                {"ctx", "", "N", "context length each sequence can reach (sizes the KV cache)", "8192"},
                {"profile", "", "", "time every op; print the phase profile of all steps when the server stops"},
                {"gpu-memory", "", "F|SIZE",
                 "with --device cuda: the device memory the engine may use (0.9 = 90% of the GPU, or 60G); the KV "
                 "cache takes what the weights, state slots and activations leave, at least --ctx tokens"},
                {"step-tokens", "", "N", "token budget of one batched step", "512"},
                {"no-prefix-cache", "", "", "disable prefix caching"},
                {"sample-candidates", "", "N",
                 "sampled rows come back from the device as their first N tokens of the sampling order and their "
                 "mass, drawn with the same bits as the whole row (-1 auto: 1024 with --device cuda, off on the "
                 "CPU; 0 off; up to 4096)",
                 "-1"},
                {"max-concurrent", "", "N", "generation requests in flight before 429", "64"},
                {"max-body-bytes", "", "N", "largest request body", "8388608"},
                {"max-prompt-tokens", "", "N", "longest prompt accepted", "32768"},
                {"max-tokens-limit", "", "N", "largest max_tokens accepted", "4096"},
                {"max-n", "", "N", "largest n accepted", "8"},
                {"drain-timeout", "", "SECONDS", "how long in-flight requests may finish on shutdown", "30"},
                {"threads", "t", "N", "CPU threads", "all cores"},
                {"device", "", "cpu|cuda", "backend", "cpu"},
                {"kv-cache", "", "f32|bf16", kKvCacheHelp, kKvCacheDefault},
                {"matmul-precision", "", "bf16x3|bf16x2|bf16|exact", kMatmulPrecisionHelp, "bf16x3"},
                {"deterministic", "", "",
                 std::string(kDeterministicHelp) +
                     "; on either device the scheduler then ends prompt chunks only on the 64-token grid, recomputes "
                     "preempted tokens one per step and (DeltaNet models) caches only prompts' prefixes, so a response "
                     "does not depend on the other requests (needs --step-tokens >= 64)"}},
    .run = serve_cmd,
}};

}  // namespace
}  // namespace kestrel::cli

// kestrel run: generate a continuation of a prompt given as token ids.
#include <cstdio>

#include "cli/backend_select.h"
#include "cli/command.h"
#include "cli/sampling_options.h"
#include "cli/profile_print.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generate.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

constexpr SamplingDefaults kRunSampling{.temperature = 0.0, .top_p = 1.0};

int run_cmd(const Args& args) {
  const std::string dir = args.require("model");
  if (args.has("prompt-ids") == args.has("prompt"))
    bad_input("give the prompt either as text (--prompt TEXT) or as token ids (--prompt-ids 1,2,3)");
  std::vector<int32_t> prompt;
  std::unique_ptr<tok::Tokenizer> tokenizer;
  if (args.has("prompt")) {
    // Text in, text out: the model directory's tokenizer (or --tokenizer PATH).
    tokenizer = std::make_unique<tok::Tokenizer>(tok::Tokenizer::load(args.get("tokenizer", dir)));
    prompt = tokenizer->encode(args.get("prompt"), {.add_special_tokens = !args.flag("no-special")});
  } else {
    for (int64_t v : parse_int_list(args.get("prompt-ids"), "--prompt-ids")) {
      if (v < 0 || v > INT32_MAX) bad_input("--prompt-ids: ", v, " is not a token id");
      prompt.push_back(int32_t(v));
    }
  }
  if (args.has("threads")) ThreadPool::set_global_threads(int(args.get_int("threads", 0, 1, 1024)));
  GenerateOptions opts;
  opts.max_new_tokens = int(args.get_int("n", 16, 1, 1 << 20));
  opts.prefill_chunk = int(args.get_int("chunk", 512, 1, 1 << 20));
  const BackendOptions bo = backend_options(args);
  if (bo.deterministic && opts.prefill_chunk % 64 != 0)
    bad_input("--deterministic needs --chunk to be a multiple of 64 (the prompt split every deterministic run "
              "shares), got ", opts.prefill_chunk);
  opts.sampling = sampling_params(args, kRunSampling);
  opts.sample_candidates = int(args.get_int("sample-candidates", -1, -1, Runner::kMaxSampleCandidates));
  auto backend = make_backend(bo);
  std::unique_ptr<ProfilingOps> profiler;  // --profile: every op timed, printed at the end
  Ops* ops = backend.get();
  if (args.flag("profile")) {
    profiler = std::make_unique<ProfilingOps>(*backend);
    profiler->set_recording(true);
    ops = profiler.get();
  }
  LoadedModel lm = load_model(dir, *ops);
  if (!args.flag("ignore-eos")) {
    opts.stop_token_ids = lm.config().eos_token_ids;
    if (tokenizer && tokenizer->eos_id()) opts.stop_token_ids.push_back(*tokenizer->eos_id());
  }
  Runner runner(*lm.model, cpu_cache_sizing(lm.config(), 1, int64_t(prompt.size()) + opts.max_new_tokens));
  GenerateResult r;
  if (tokenizer) {  // stream the text as it is generated
    if (tokenizer->vocab_size() > lm.config().vocab_size)
      bad_input(args.get("tokenizer", dir), ": the tokenizer has ", tokenizer->vocab_size(),
                " tokens but the model's vocabulary is ", lm.config().vocab_size);
    tok::StreamDecoder stream(*tokenizer, {.skip_special_tokens = true});
    r = generate(runner, prompt, opts, [&](int32_t t) {
      std::fputs(stream.push(t).c_str(), stdout);
      std::fflush(stdout);
    });
    std::printf("%s\n", stream.finish().c_str());
  } else {
    r = generate(runner, prompt, opts);
    std::printf("[");
    for (size_t i = 0; i < r.tokens.size(); ++i) std::printf("%s%d", i ? ", " : "", r.tokens[i]);
    std::printf("]\n");
  }
  if (profiler) {
    profiler->set_recording(false);
    profiler->collect();
    std::fprintf(stderr, "phase profile (%s time, prefill and decode steps together):\n",
                 backend->device() == Device::kCpu ? "wall" : "device");
    print_profile(stderr, cat(r.tokens.size(), " generated tokens"), profiler->profile());
  }
  if (args.flag("stats")) {
    std::fprintf(stderr, "prefill: %zu tokens in %.3f s (%.1f tok/s); decode: %zu tokens in %.3f s (%.2f tok/s)\n",
                 prompt.size(), r.prefill_seconds, double(prompt.size()) / r.prefill_seconds, r.tokens.size(),
                 r.decode_seconds, r.tokens.size() > 1 ? double(r.tokens.size() - 1) / r.decode_seconds : 0.0);
    if (r.candidate_draws > 0)
      std::fprintf(stderr, "sampling: %d of %zu tokens drawn from the backend's candidates, %d of those needed the whole row\n",
                   r.candidate_draws, r.tokens.size(), r.whole_row_draws);
  }
  return 0;
}

const Registrar kReg{{
    .name = "run",
    .summary = "generate a continuation of a prompt",
    .usage = "kestrel run -m DIR|FILE.gguf (--prompt TEXT | --prompt-ids 1,2,3) [-n 16] "
             "[--temperature T --top-k K --top-p P --min-p P --repetition-penalty R --presence-penalty X --frequency-penalty X --seed S] [--device cpu|cuda] [--matmul-precision bf16x3|bf16x2|bf16|exact] [--kv-cache f32|bf16] [--deterministic]",
    .details = "With --prompt, streams the generated text (the model directory's tokenizer.json, a GGUF's own tokenizer, or --tokenizer);\n"
               "with --prompt-ids, prints the generated token ids as a JSON array. Greedy unless --temperature > 0.\n"
               "Generation stops at the model's EOS ids (config.json / generation_config.json) unless --ignore-eos.",
    .options = with_sampling_options(
               {{"model", "m", "DIR", "model directory, or a .gguf file"},
                {"prompt", "p", "TEXT", "prompt text (tokenized with the model's tokenizer, BOS/EOS as its post-processor adds)"},
                {"prompt-ids", "", "IDS", "comma-separated prompt token ids"},
                {"profile", "", "", "print a phase profile of the run (time per step by phase and by op) to stderr"},
                {"tokenizer", "", "PATH", "tokenizer.json or its directory (or a GGUF file), for --prompt", "the model"},
                {"no-special", "", "", "do not add the tokenizer's special tokens (BOS) to --prompt"},
                {"n", "n", "N", "tokens to generate", "16"}},
               kRunSampling,
               {{"chunk", "", "N", "prompt tokens per prefill step", "512"},
                {"ignore-eos", "", "", "keep generating past EOS tokens", ""},
                {"stats", "", "", "print prefill and decode speed to stderr", ""},
                {"sample-candidates", "", "N",
                 "a sampled token comes back from the device as the row's first N tokens of the sampling order and "
                 "their mass, drawn with the same bits as the whole row (-1 auto: 1024 with --device cuda, off on "
                 "the CPU; 0 off; up to 4096)",
                 "-1"},
                {"threads", "t", "N", "CPU threads", "all cores"},
                {"device", "", "cpu|cuda", "backend", "cpu"},
                {"kv-cache", "", "f32|bf16", kKvCacheHelp, kKvCacheDefault},
                {"matmul-precision", "", "bf16x3|bf16x2|bf16|exact", kMatmulPrecisionHelp, "bf16x3"},
                {"deterministic", "", "", std::string(kDeterministicHelp) +
                                              "; --chunk must then be a multiple of 64 (the prompt split kestrel "
                                              "serve --deterministic makes, so greedy decoding gives its tokens)"}}),
    .run = run_cmd,
}};

}  // namespace
}  // namespace kestrel::cli

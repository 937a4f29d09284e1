// kestrel bench-sampler: how long the host sampler takes a row of logits, against the least it
// must do (every token's weight computed once, one thread) and the full-sort reference it
// replaced, for the sampling settings users send; and a batch of rows sampled on all threads, as
// the scheduler does after a step.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cli/bench_util.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/sampler.h"

namespace kestrel::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {.name = "vocab", .value_name = "N,...", .help = "vocabulary sizes", .default_value = "151936,248320,262144"},
    {.name = "rows", .value_name = "N", .help = "rows of the batched measurement (all threads)", .default_value = "64"},
    {.name = "threads", .short_name = "t", .value_name = "N", .help = "threads for the batch", .default_value = "all cores"},
    {.name = "seconds", .value_name = "S", .help = "minimum time per measurement", .default_value = "1"},
    {.name = "out", .value_name = "FILE", .help = "JSON results", .default_value = "bench/results/sampler-DATE.json"},
};

struct Setting {
  const char* name;
  SamplingParams p;
};

SamplingParams sampling(float temperature, float top_p, int top_k, float min_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_p = top_p;
  p.top_k = top_k;
  p.min_p = min_p;
  p.seed = 1;
  return p;
}

// Logits shaped like a language model's next-token row: a bulk around 0 (sd 2.5) and a few
// tokens lifted 8 to 16 above it. Row r of a batch uses its own seed.
std::vector<float> lm_row(int64_t vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> bulk(0.0f, 2.5f);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (auto& v : l) v = bulk(g);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::uniform_real_distribution<float> lift(8.0f, 16.0f);
  for (int i = 0; i < 16; ++i) l[size_t(pick(g))] += lift(g);
  return l;
}

std::vector<int64_t> parse_list(const std::string& text, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 2 || v > (int64_t(1) << 26))
      bad_input(flag, ": expected comma-separated integers in [2, 2^26], got '", item, "'");
    out.push_back(v);
  }
  if (out.empty()) bad_input(flag, ": no values given");
  return out;
}

int run_bench(const Args& args) {
  const std::vector<int64_t> vocabs = parse_list(args.get("vocab", "151936,248320,262144"), "--vocab");
  const int rows = int(args.get_int("rows", 64, 1, 4096));
  const int threads = int(args.get_int("threads", std::max(1u, std::thread::hardware_concurrency()), 1, 1024));
  const double seconds = args.get_double("seconds", 1.0, 0.01, 3600);
  ThreadPool pool(threads);
  const Setting settings[] = {
      {"T 1.0 (OpenAI default)", sampling(1.0f, 1.0f, 0, 0.0f)},
      {"T 0.7 top_p 0.95 (chat)", sampling(0.7f, 0.95f, 0, 0.0f)},
      {"T 0.6 top_p 0.95 top_k 20", sampling(0.6f, 0.95f, 20, 0.0f)},
      {"T 0.8 min_p 0.05", sampling(0.8f, 1.0f, 0, 0.05f)},
  };

  nlohmann::json record = {
      {"date", now_utc()},
      {"machine", machine_record()},
      {"command", "kestrel bench-sampler --vocab " + args.get("vocab", "151936,248320,262144") + " --rows " +
                      std::to_string(rows) + " --threads " + std::to_string(threads) + " --seconds " +
                      args.get("seconds", "1")},
      {"logits", "synthetic: normal(0, 2.5) bulk, 16 tokens lifted by U(8, 16)"},
      {"threads", threads},
      {"results", nlohmann::json::array()}};
  std::printf("host sampler, one row on one thread; floor = every token's weight computed once (one thread); batch = %d rows on %d threads\n",
              rows, threads);
  std::printf("%8s  %-27s %12s %12s %8s %14s %14s\n", "vocab", "setting", "kestrel us", "floor us", "ratio",
              "full sort us", "batch ms");
  for (const int64_t vocab : vocabs) {
    std::vector<std::vector<float>> batch;
    for (int r = 0; r < rows; ++r) batch.push_back(lm_row(vocab, uint32_t(r + 1)));
    const std::vector<float>& one = batch[0];
    volatile double sink = 0;
    // The floor: every token's weight (sampling_weight of its logit less the top's) computed once,
    // which any sampler of this definition must do.
    std::vector<double> weights(static_cast<size_t>(vocab));
    const float top = *std::max_element(one.begin(), one.end());
    const double floor = median_seconds([&] {
      sampling_weights(one.data(), top, weights.data(), vocab);
      sink = sink + weights[size_t(vocab / 2)];
    }, seconds);
    for (const Setting& st : settings) {
      Sampler sampler(st.p);
      const double ours = median_seconds([&] { sink = sink + sampler.sample(one.data(), vocab); }, seconds);
      ReferenceSampler reference(st.p);
      const double full = median_seconds([&] { sink = sink + reference.sample(one.data(), vocab); }, seconds);
      std::vector<Sampler> samplers(size_t(rows), Sampler(st.p));
      const double batched = median_seconds([&] {
        pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) samplers[size_t(r)].sample(batch[size_t(r)].data(), vocab);
        });
      }, seconds);
      std::printf("%8lld  %-27s %12.1f %12.1f %8.2f %14.1f %14.3f\n", (long long)vocab, st.name, ours * 1e6,
                  floor * 1e6, ours / floor, full * 1e6, batched * 1e3);
      record["results"].push_back({{"vocab", vocab},
                                   {"setting", st.name},
                                   {"temperature", st.p.temperature},
                                   {"top_p", st.p.top_p},
                                   {"top_k", st.p.top_k},
                                   {"min_p", st.p.min_p},
                                   {"us_per_row", ours * 1e6},
                                   {"floor_us", floor * 1e6},
                                   {"ratio_to_floor", ours / floor},
                                   {"full_sort_us", full * 1e6},
                                   {"batch_rows", rows},
                                   {"batch_ms", batched * 1e3}});
    }
  }
  save_bench_record(args, "sampler", record);
  return 0;
}

const Registrar kReg{{.name = "bench-sampler",
                      .summary = "measure the host sampler (microseconds a row) for common sampling settings",
                      .usage = "kestrel bench-sampler [--vocab 151936,248320] [--rows 64] [--threads N]",
                      .details = "Times Sampler::sample on one synthetic language-model row (a normal bulk and a\n"
                                 "few lifted tokens) per vocabulary size and setting, on one thread, against the\n"
                                 "floor of computing every token's weight once and the full-sort ReferenceSampler; then --rows rows,\n"
                                 "each with its own sampler, on --threads threads (what the scheduler does after a\n"
                                 "step whose rows are not all greedy).",
                      .options = kOptions,
                      .run = run_bench}};

}  // namespace
}  // namespace kestrel::cli

// kestrel bench-tokenizer: encode and decode throughput (MB/s of UTF-8 text) on a corpus, on one
// thread (the whole corpus as one text) and on all threads (the corpus split into lines, the lines
// spread over a thread pool) — the same method as bench/hf_tokenizers_bench.py.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/bench_util.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/files.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {.name = "tokenizer", .short_name = "t", .value_name = "PATHS",
     .help = "comma-separated tokenizer.json files or model directories"},
    {.name = "corpus", .value_name = "FILE",
     .help = "UTF-8 text to tokenize", .default_value = "first 200,000 characters of `bible -f Gen1:1-Rev22:21`"},
    {.name = "threads", .value_name = "N", .help = "threads for the all-threads runs", .default_value = "all cores"},
    {.name = "seconds", .value_name = "S", .help = "minimum time per measurement", .default_value = "2"},
    {.name = "save-corpus", .value_name = "FILE", .help = "also write the corpus used (for bench/hf_tokenizers_bench.py)"},
    {.name = "out", .value_name = "FILE", .help = "JSON results", .default_value = "bench/results/tokenizer-DATE.json"},
};

std::string default_corpus() {
  std::string text;
  FILE* pipe = popen("bible -f \"Gen1:1-Rev22:21\" 2>/dev/null", "r");
  if (!pipe) bad_input("--corpus not given and the `bible` command could not run (apt install bible-kjv)");
  char buffer[65536];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) text.append(buffer, n);
  pclose(pipe);
  if (text.empty()) bad_input("--corpus not given and the `bible` command printed nothing (apt install bible-kjv bible-kjv-text)");
  size_t i = 0, chars = 0;
  while (i < text.size() && chars < 200000) {
    auto b = static_cast<unsigned char>(text[i]);
    i += b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    ++chars;
  }
  return text.substr(0, i);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    lines.push_back(text.substr(start, end - start));
    start = end;
  }
  return lines;
}

int run_bench(const Args& args) {
  std::vector<std::string> paths;
  {
    std::stringstream in(args.require("tokenizer"));
    for (std::string p; std::getline(in, p, ',');) if (!p.empty()) paths.push_back(p);
  }
  std::string corpus_name = args.has("corpus") ? args.get("corpus") : "bible -f Gen1:1-Rev22:21 (first 200000 chars)";
  std::string corpus = args.has("corpus") ? read_file(args.get("corpus")) : default_corpus();
  int threads = static_cast<int>(args.get_int("threads", std::max(1u, std::thread::hardware_concurrency()), 1, 1024));
  double seconds = args.get_double("seconds", 2.0, 0.01, 3600);
  if (args.has("save-corpus")) write_file_atomic(args.get("save-corpus"), corpus);
  std::vector<std::string> docs = split_lines(corpus);
  double mb = corpus.size() / 1e6;
  ThreadPool pool(threads);

  nlohmann::json record = {
      {"date", now_utc("%Y-%m-%dT%H:%M:%SZ")},
      {"machine", machine_record()},
      {"command", "kestrel bench-tokenizer --tokenizer " + args.get("tokenizer") +
                      (args.has("corpus") ? " --corpus " + args.get("corpus") : "") + " --threads " +
                      std::to_string(threads) + " --seconds " + args.get("seconds", "2")},
      {"corpus", {{"source", corpus_name}, {"bytes", corpus.size()}, {"documents", docs.size()}}},
      {"threads", threads},
      {"results", nlohmann::json::array()}};

  std::printf("corpus: %s, %.3f MB, %zu lines; all threads = %d\n", corpus_name.c_str(), mb, docs.size(), threads);
  std::printf("%-28s %9s %14s %14s %14s %14s\n", "tokenizer", "tokens", "encode 1T MB/s", "encode NT MB/s",
              "decode 1T MB/s", "decode NT MB/s");
  for (const std::string& path : paths) {
    auto tok = tok::Tokenizer::load(path);
    std::vector<int32_t> ids = tok.encode(corpus);
    std::vector<std::vector<int32_t>> doc_ids(docs.size());
    for (size_t i = 0; i < docs.size(); ++i) doc_ids[i] = tok.encode(docs[i]);

    double enc1 = median_seconds([&] { tok.encode(corpus); }, seconds);
    double encn = median_seconds([&] {
      pool.parallel_for(static_cast<int64_t>(docs.size()), [&](int64_t b, int64_t e) {
        std::vector<int32_t> out;
        for (int64_t i = b; i < e; ++i) {
          out.clear();
          tok.encode_into(docs[i], out);
        }
      });
    }, seconds);
    double dec1 = median_seconds([&] { tok.decode(ids); }, seconds);
    double decn = median_seconds([&] {
      pool.parallel_for(static_cast<int64_t>(docs.size()), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) tok.decode(doc_ids[i]);
      });
    }, seconds);
    std::string label = std::filesystem::path(path).lexically_normal().string();
    if (label.size() > 28) label = "…" + label.substr(label.size() - 27);
    std::printf("%-28s %9zu %14.1f %14.1f %14.1f %14.1f\n", label.c_str(), ids.size(), mb / enc1, mb / encn,
                mb / dec1, mb / decn);
    record["results"].push_back({{"tokenizer", path},
                                 {"tokens", ids.size()},
                                 {"encode_1thread_MBps", mb / enc1},
                                 {"encode_all_threads_MBps", mb / encn},
                                 {"decode_1thread_MBps", mb / dec1},
                                 {"decode_all_threads_MBps", mb / decn}});
  }
  save_bench_record(args, "tokenizer", record);
  return 0;
}

const Registrar kReg{{.name = "bench-tokenizer",
                      .summary = "measure tokenizer encode/decode throughput (MB/s)",
                      .usage = "kestrel bench-tokenizer --tokenizer PATHS [--corpus FILE] [--threads N]",
                      .details = "Encode: the whole corpus as one text on one thread, and its lines spread over N\n"
                                 "threads. Decode: the ids of the whole corpus, and of each line over N threads.\n"
                                 "MB/s counts the corpus's UTF-8 bytes. Compare with bench/hf_tokenizers_bench.py.",
                      .options = kOptions,
                      .run = run_bench}};

}  // namespace
}  // namespace kestrel::cli

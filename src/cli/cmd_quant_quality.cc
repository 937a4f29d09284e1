// kestrel quant-quality: how far a quantized model drifts from its BF16 source over a text.
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "cli/backend_select.h"
#include "cli/bench_util.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/files.h"
#include "engine/quant_quality.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

constexpr const char* kKjvCommand = "bible -f Gen1:1-Rev22:21 2>/dev/null";

// The King James text as Debian's bible-kjv prints it (the default corpus).
std::string kjv_text() {
  FILE* p = popen(kKjvCommand, "r");
  if (!p) fail(ErrorKind::kIo, "quant-quality: cannot run '", kKjvCommand, "'");
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0 || text.empty())
    bad_input("quant-quality: no --text given and '", kKjvCommand,
              "' printed nothing (install Debian's bible-kjv, or pass --text FILE)");
  return text;
}

int run_quant_quality(const Args& args) {
  const std::string quant_path = args.require("model");
  const std::string source_dir = args.require("source");
  const BackendOptions bo = backend_options(args);  // refused before the text is read
  QuantQualityOptions o;
  o.ctx = args.get_int("ctx", 512, 2, 1 << 20);
  o.max_tokens = args.get_int("max-tokens", 8192, 2, int64_t(1) << 30);
  const std::string tok_path = path_join(source_dir, "tokenizer.json");
  if (!file_exists(tok_path))
    bad_input(source_dir, ": no tokenizer.json (quant-quality tokenizes the text with the source's tokenizer)");
  const tok::Tokenizer tokenizer = tok::Tokenizer::load(tok_path);
  const std::string text = args.has("text") ? read_file(args.get("text")) : kjv_text();
  std::vector<int32_t> tokens = tokenizer.encode(text, {.add_special_tokens = false});
  auto ops = make_backend(bo);
  LoadedModel source = load_model(source_dir, *ops);
  LoadedModel quant = load_model(quant_path, *ops);
  const QuantQuality q = measure_quant_quality(*quant.model, *source.model, tokens, o);
  std::printf("quantized   %s\nsource      %s\ntext        %s, %lld tokens used in %lld windows of %lld\n",
              quant_path.c_str(), source_dir.c_str(), args.has("text") ? args.get("text").c_str() : "King James Bible",
              (long long)(q.positions + q.windows), (long long)q.windows, (long long)o.ctx);
  std::printf("KL(source || quantized)  mean %.6f  p90 %.6f  p99 %.6f  max %.6f nats over %lld positions\n", q.kl_mean,
              q.kl_p90, q.kl_p99, q.kl_max, (long long)q.positions);
  std::printf("top-1 agreement          %.2f%%\n", 100.0 * q.top1_agreement);
  std::printf("perplexity               source %.4f  quantized %.4f  (%+.2f%%)\n", q.ppl_source, q.ppl_quant,
              100.0 * (q.ppl_quant / q.ppl_source - 1.0));
  if (args.has("json")) {
    const std::string date = now_utc();
    const std::string mp = matmul_precision_report(bo);  // empty on cpu
    nlohmann::json j = {{"quantized", quant_path}, {"source", source_dir}, {"device", ops->name()},
                        {"matmul_precision", mp.empty() ? nlohmann::json() : nlohmann::json(mp)},
                        {"kv_cache", std::string(dtype_name(ops->kv_cache_dtype()))},
                        {"date", date}, {"ctx", o.ctx}, {"windows", q.windows}, {"positions", q.positions},
                        {"kl_mean", q.kl_mean}, {"kl_p90", q.kl_p90}, {"kl_p99", q.kl_p99}, {"kl_max", q.kl_max},
                        {"top1_agreement", q.top1_agreement}, {"ppl_source", q.ppl_source},
                        {"ppl_quantized", q.ppl_quant}};
    write_file_atomic(args.get("json"), j.dump(1) + "\n");
  }
  return 0;
}

const Registrar kReg{{
    .name = "quant-quality",
    .summary = "KL divergence, top-1 agreement and perplexity of a quantized model against its source",
    .usage = "kestrel quant-quality -m QUANT.gguf|DIR --source HF_DIR [--text FILE] [--ctx 512] [--max-tokens 8192] "
             "[--device cpu|cuda] [--matmul-precision bf16x3|bf16x2|bf16|exact] [--kv-cache f32|bf16]",
    .details = "Both models read the same windows of the text (tokenized with the source's tokenizer.json);\n"
               "at every position the source's next-token distribution is the teacher: KL(source || quantized)\n"
               "in nats (mean, p90, p99, max), how often the two top-1 tokens agree, and each model's\n"
               "perplexity of the text. Without --text the corpus is the King James Bible as Debian's\n"
               "bible-kjv prints it ('bible -f Gen1:1-Rev22:21').",
    .options = {{"model", "m", "PATH", "the quantized model: a GGUF file or a model directory"},
                {"source", "", "DIR", "the BF16 source checkpoint (with tokenizer.json)"},
                {"text", "", "FILE", "text to evaluate on", "the King James Bible"},
                {"ctx", "", "N", "tokens per window", "512"},
                {"max-tokens", "", "N", "tokens of the text to use", "8192"},
                {"json", "", "FILE", "also write the figures as JSON"},
                {"device", "", "cpu|cuda", "backend", "cpu"},
                {"kv-cache", "", "f32|bf16", kKvCacheHelp, kKvCacheDefault},
                {"matmul-precision", "", "bf16x3|bf16x2|bf16|exact", kMatmulPrecisionHelp, "bf16x3"}},
    .run = run_quant_quality,
}};

}  // namespace
}  // namespace kestrel::cli

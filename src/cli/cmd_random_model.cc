// kestrel random-model: write a checkpoint with a released model's exact config and random weights.
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "core/files.h"
#include "tokenizer/tokenizer.h"
#include "core/progress.h"
#include "model/presets.h"
#include "model/random_model.h"

namespace kestrel::cli {
namespace {

int list_presets() {
  std::printf("%-20s %-12s %7s %6s %8s %9s %10s  %s\n", "name", "model_type", "hidden", "layers", "vocab", "params",
              "bf16", "unconfirmed");
  for (const auto& p : model_presets()) {
    const uint64_t n = preset_parameter_count(p.name, 512);
    std::printf("%-20s %-12s %7lld %6d %8s %9s %10s  %s\n", p.name.c_str(), preset_model_type(p.family),
                (long long)p.hidden, p.layers, p.vocab ? std::to_string(p.vocab).c_str() : "512",
                human_count(double(n)).c_str(), human_bytes(2.0 * double(n)).c_str(), p.unconfirmed.c_str());
  }
  return 0;
}

int run_random_model(const Args& args) {
  if (args.flag("list")) return list_presets();
  RandomModelParams params{
      .like = args.require("like"),
      .out = args.require("out"),
      .seed = uint64_t(args.get_int("seed", 0, 0, INT64_MAX)),
      .vocab = args.get_int("vocab", 512, 16, int64_t(1) << 24),
      .max_shard_bytes = uint64_t(args.get_int("max-shard-bytes", 4'000'000'000, 1, INT64_MAX)),
      .progress = !args.flag("quiet"),
  };
  if (args.has("tokenizer")) {
    // The model's vocabulary comes from the tokenizer, whose files travel with the checkpoint.
    std::string path = args.get("tokenizer");
    std::string dir = is_directory(path) ? path : path.substr(0, path.find_last_of('/') + 1);
    if (dir.empty()) dir = ".";
    const std::string json = is_directory(path) ? path_join(path, "tokenizer.json") : path;
    tok::Tokenizer tokenizer = tok::Tokenizer::load(json);
    if (params.like.rfind("tiny-", 0) != 0)
      bad_input("--tokenizer is for the tiny-* test models (released models keep their own vocabulary)");
    params.vocab = tokenizer.vocab_size();
    params.extra_files.push_back(json);
    for (const char* extra : {"tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"}) {
      if (file_exists(path_join(dir, extra))) params.extra_files.push_back(path_join(dir, extra));
    }
  }
  RandomModelReport r = write_random_model(params);
  std::printf("wrote %s: %s parameters, %s of bf16 in %d file%s, %llu tensors (seed %llu)\n", params.out.c_str(),
              human_count(double(r.n_params)).c_str(), human_bytes(double(r.n_bytes)).c_str(), r.n_shards,
              r.n_shards == 1 ? "" : "s", (unsigned long long)r.n_tensors, (unsigned long long)params.seed);
  return 0;
}

const Registrar kReg{{
    .name = "random-model",
    .summary = "write a checkpoint with a released model's config and random weights",
    .usage = "kestrel random-model --like NAME --out DIR [--seed N] [--vocab N | --tokenizer PATH] [--list]",
    .details = "Writes config.json and generation_config.json exactly as the model ships them, and random\n"
               "bf16 text weights under the released tensor names (no vision tower, no MTP layer), scaled so\n"
               "activations stay O(1). Large models are sharded (model.safetensors.index.json). The directory\n"
               "is built under a temporary name and renamed when complete. --list shows the known models.",
    .options = {{"like", "", "NAME", "released model to imitate (see --list)", ""},
                {"out", "o", "DIR", "output directory (replaced if it exists)", ""},
                {"seed", "", "N", "random seed", "0"},
                {"vocab", "", "N", "vocabulary size of the tiny-* test models", "512"},
                {"tokenizer", "", "PATH", "tiny-* models: take the vocabulary from this tokenizer.json (or its directory) and copy its files in"},
                {"max-shard-bytes", "", "N", "largest safetensors file", "4000000000"},
                {"quiet", "q", "", "no progress bar", ""},
                {"list", "", "", "list the known models and exit", ""}},
    .run = run_random_model,
}};

}  // namespace
}  // namespace kestrel::cli

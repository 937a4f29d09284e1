// kestrel tokenize: text → token ids (a JSON array), with a model's tokenizer.json.
#include <cstdio>
#include <iostream>
#include <iterator>

#include "cli/command.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {.name = "tokenizer", .short_name = "t", .value_name = "PATH",
     .help = "tokenizer.json, or a model directory holding one"},
    {.name = "special", .help = "add the post-processor's special tokens (BOS, ...), like HF add_special_tokens=True"},
};

int run_tokenize(const Args& args) {
  auto tokenizer = tok::Tokenizer::load(args.require("tokenizer"));
  if (args.positional().size() != 1) bad_input("expected one TEXT argument (or - to read standard input), got ", args.positional().size());
  std::string text = args.positional()[0];
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::vector<int32_t> ids = tokenizer.encode(text, {.add_special_tokens = args.flag("special")});
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

const Registrar kReg{{.name = "tokenize",
                      .summary = "print the token ids of a text (JSON array)",
                      .usage = "kestrel tokenize --tokenizer PATH [--special] TEXT|-",
                      .details = "TEXT is encoded as Hugging Face tokenizers would (add_special_tokens=False unless\n"
                                 "--special); - reads the text from standard input.",
                      .options = kOptions,
                      .run = run_tokenize}};

}  // namespace
}  // namespace kestrel::cli

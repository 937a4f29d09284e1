// kestrel detokenize: token ids → text, with a model's tokenizer.json.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::cli {
namespace {

const std::vector<OptionSpec> kOptions = {
    {.name = "tokenizer", .short_name = "t", .value_name = "PATH",
     .help = "tokenizer.json, or a model directory holding one"},
    {.name = "skip-special", .help = "leave out special tokens (like HF skip_special_tokens=True)"},
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int64_t> values;
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_array()) bad_input("IDS: '", text.substr(0, 80), "' is not a JSON array");
    for (const auto& v : j) {
      if (!v.is_number_integer()) bad_input("IDS: ", v.dump(), " is not an integer token id");
      values.push_back(v.get<int64_t>());
    }
  } else {
    std::string trimmed = first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
    if (trimmed.empty()) return {};
    values = parse_int_list(trimmed, "IDS");
  }
  std::vector<int32_t> ids;
  for (int64_t v : values) {
    if (v < 0 || v > INT32_MAX) bad_input("IDS: ", v, " is not a valid token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

int run_detokenize(const Args& args) {
  auto tokenizer = tok::Tokenizer::load(args.require("tokenizer"));
  if (args.positional().size() != 1) bad_input("expected one IDS argument (or - to read standard input), got ", args.positional().size());
  std::string text = args.positional()[0];
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  std::string out = tokenizer.decode(parse_ids(text), {.skip_special_tokens = args.flag("skip-special")});
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

const Registrar kReg{{.name = "detokenize",
                      .summary = "print the text of token ids",
                      .usage = "kestrel detokenize --tokenizer PATH [--skip-special] IDS|-",
                      .details = "IDS is comma-separated (1,2,3) or a JSON array ([1, 2, 3]); - reads them from\n"
                                 "standard input. Prints the decoded text followed by a newline.",
                      .options = kOptions,
                      .run = run_detokenize}};

}  // namespace
}  // namespace kestrel::cli

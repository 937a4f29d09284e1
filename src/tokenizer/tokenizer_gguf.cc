// A tokenizer from a GGUF file's tokenizer.ggml.* metadata (what `kestrel convert` and llama.cpp's
// converter write), so `kestrel run/serve/chat -m FILE.gguf` need no tokenizer.json beside it.
//
// Byte-level BPE only (tokenizer.ggml.model "gpt2") with the Qwen-line pre-tokenizers "qwen2"
// and "qwen35". The metadata is turned back into the tokenizer.json it came from and parsed by
// the same code as a tokenizer.json, so both sources tokenize identically:
//   - tokens of type 1 (normal) and 6 (byte) form model.vocab; types 3 (control) and 4
//     (user-defined) become added tokens, special for control; the converters' padding entries
//     "[PAD<id>]" (type 4, at their own id) are no tokens at all, as in the source tokenizer;
//   - tokenizer.ggml.merges are the BPE merges in rank order;
//   - the pre-tokenizer is the split regex the name stands for (the Qwen3 / Qwen3.5 tokenizer.json
//     patterns; "qwen35" adds combining marks \p{M} to the letter classes) then ByteLevel;
//   - the normalizer is NFC, as both source tokenizers declare (GGUF does not record it;
//     llama.cpp skips it, which differs from Hugging Face only on text that is not NFC);
//   - bos/eos are tokenizer.ggml.bos_token_id / eos_token_id, and a BOS is prepended when
//     tokenizer.ggml.add_bos_token is true.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer_impl.h"

namespace kestrel::tok {
namespace {

using json = nlohmann::json;

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

const char* split_pattern(const std::string& pre) {
  if (pre == "qwen2")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pre == "qwen35")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return nullptr;
}

const GgufValue& require(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (!v) bad_input(f.path(), ": metadata key '", key, "' is missing (the file carries no tokenizer)");
  return *v;
}

std::optional<int32_t> token_id(const GgufFile& f, const std::string& key, size_t n_tokens) {
  const GgufValue* v = f.find(key);
  if (!v) return std::nullopt;
  const std::optional<int64_t> id = v->to_int();
  if (!id) bad_input(f.path(), ": metadata key '", key, "' must be an integer");
  if (*id < 0 || uint64_t(*id) >= n_tokens)
    bad_input(f.path(), ": ", key, " = ", *id, " is outside the token list of ", n_tokens);
  return int32_t(*id);
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  const GgufValue& model = require(f, "tokenizer.ggml.model");
  if (!model.str()) bad_input(f.path(), ": tokenizer.ggml.model must be a string");
  if (*model.str() != "gpt2")
    unsupported(f.path(), ": tokenizer.ggml.model '", *model.str(),
                "' cannot be loaded yet (byte-level BPE, 'gpt2', only); pass --tokenizer with the model's tokenizer.json");
  const GgufValue* pre_value = f.find("tokenizer.ggml.pre");
  const std::string pre = pre_value && pre_value->str() ? *pre_value->str() : std::string("(none)");
  const char* pattern = split_pattern(pre);
  if (!pattern)
    unsupported(f.path(), ": tokenizer.ggml.pre '", pre,
                "' is not a pre-tokenizer kestrel knows (qwen2, qwen35); pass --tokenizer with the model's tokenizer.json");

  const GgufValue& tokens_value = require(f, "tokenizer.ggml.tokens");
  if (!tokens_value.is_array() || tokens_value.elem_type() != GgufValueType::kString)
    bad_input(f.path(), ": tokenizer.ggml.tokens must be an array of strings");
  const std::vector<std::string>& tokens = tokens_value.strings();
  const size_t n = tokens.size();
  if (n == 0 || n > (size_t{1} << 31)) bad_input(f.path(), ": tokenizer.ggml.tokens has ", n, " entries");

  std::vector<int32_t> types(n, kNormal);
  if (const GgufValue* t = f.find("tokenizer.ggml.token_type")) {
    if (!t->is_array() || t->size() != n)
      bad_input(f.path(), ": tokenizer.ggml.token_type must be an integer array of ", n, " entries (one per token)");
    for (size_t i = 0; i < n; ++i) {
      const std::optional<int64_t> v = t->int_at(i);
      if (!v || *v < kNormal || *v > kByte)
        bad_input(f.path(), ": tokenizer.ggml.token_type[", i, "] must be 1..6 (normal, unknown, control, user-defined, unused, byte)");
      types[i] = int32_t(*v);
    }
  }

  json doc = json::object();
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    switch (types[i]) {
      case kNormal:
      case kByte:
        vocab[tokens[i]] = i;
        break;
      case kControl:
      case kUserDefined:
        if (types[i] == kUserDefined && tokens[i] == "[PAD" + std::to_string(i) + "]") break;
        added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                         {"rstrip", false}, {"normalized", false}, {"special", types[i] == kControl}});
        break;
      case kUnknown:
      case kUnused:
        break;  // byte-level BPE has no unknown token; unused ids decode to nothing
    }
  }
  json merges = json::array();
  if (const GgufValue* m = f.find("tokenizer.ggml.merges")) {
    if (!m->is_array() || m->elem_type() != GgufValueType::kString)
      bad_input(f.path(), ": tokenizer.ggml.merges must be an array of strings");
    for (const std::string& s : m->strings()) {
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos)
        bad_input(f.path(), ": tokenizer.ggml.merges entry '", s, "' is not two tokens separated by one space");
      merges.push_back(json::array({s.substr(0, space), s.substr(space + 1)}));
    }
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  doc["version"] = "1.0";
  doc["added_tokens"] = std::move(added);
  doc["normalizer"] = {{"type", "NFC"}};
  doc["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({{{"type", "Split"},
                                                          {"pattern", {{"Regex", pattern}}},
                                                          {"behavior", "Isolated"},
                                                          {"invert", false}},
                                                         byte_level})}};
  doc["post_processor"] = byte_level;
  doc["decoder"] = byte_level;
  doc["model"] = {{"type", "BPE"},           {"dropout", nullptr}, {"unk_token", nullptr},
                  {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                  {"byte_fallback", false},  {"ignore_merges", false}, {"vocab", std::move(vocab)},
                  {"merges", std::move(merges)}};

  std::unique_ptr<Impl> impl = parse_tokenizer(doc.dump(), {}, f.path());
  impl->bos = token_id(f, "tokenizer.ggml.bos_token_id", n);
  impl->eos = token_id(f, "tokenizer.ggml.eos_token_id", n);
  for (const auto& id : {impl->bos, impl->eos})
    if (id && (size_t(*id) >= impl->present.size() || !impl->present[size_t(*id)]))
      bad_input(f.path(), ": the bos/eos token id ", *id, " names no token ('", tokens[size_t(*id)], "')");
  if (const GgufValue* add_bos = f.find("tokenizer.ggml.add_bos_token"); add_bos && add_bos->to_bool().value_or(false)) {
    if (!impl->bos) bad_input(f.path(), ": tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id");
    impl->prefix_ids = {*impl->bos};
  }
  return Tokenizer(std::move(impl));
}

}  // namespace kestrel::tok

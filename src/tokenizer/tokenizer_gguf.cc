// A tokenizer from a GGUF file's tokenizer.ggml.* metadata (what `kestrel convert` and llama.cpp's
// converter write), so `kestrel run/serve/chat -m FILE.gguf` need no tokenizer.json beside it.
//
// Two tokenizer models. The metadata is turned back into the tokenizer.json it came from and
// parsed by the same code as a tokenizer.json, so both sources tokenize identically.
//
// "gpt2": byte-level BPE with the Qwen-line pre-tokenizers "qwen2" and "qwen35":
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
//
// "gemma4" (Gemma's SentencePiece-style BPE; tokenizer.ggml.pre absent or "gemma4"):
//   - the normalizer replaces ' ' with U+2581, there is no pre-tokenizer (what Hugging Face runs;
//     llama.cpp also cuts the text at newline runs, which no Gemma merge spans), BPE with byte
//     fallback to <0xNN> tokens, unk_token from tokenizer.ggml.unknown_token_id, and the decoder
//     Replace(U+2581 -> ' '), ByteFallback, Fuse;
//   - every token but the unused "[PAD<id>]" padding is in model.vocab; control (3), unknown (2)
//     and user-defined (4) tokens are also added tokens, matched in the raw text first, special
//     for control and unknown, and for Gemma 4's seven chat markers that llama.cpp's converter
//     types user-defined so that it renders them (tokenizer.json has them special);
//   - a BOS is prepended unless tokenizer.ggml.add_bos_token is false (llama.cpp always adds it
//     for this model); add_space_prefix and add_eos_token true are refused.
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

namespace {

// The token list and its types, checked.
struct GgufVocab {
  const std::vector<std::string>* tokens;
  std::vector<int32_t> types;
};

GgufVocab read_vocab(const GgufFile& f) {
  const GgufValue& tokens_value = require(f, "tokenizer.ggml.tokens");
  if (!tokens_value.is_array() || tokens_value.elem_type() != GgufValueType::kString)
    bad_input(f.path(), ": tokenizer.ggml.tokens must be an array of strings");
  GgufVocab v{&tokens_value.strings(), {}};
  const size_t n = v.tokens->size();
  if (n == 0 || n > (size_t{1} << 31)) bad_input(f.path(), ": tokenizer.ggml.tokens has ", n, " entries");
  v.types.assign(n, kNormal);
  if (const GgufValue* t = f.find("tokenizer.ggml.token_type")) {
    if (!t->is_array() || t->size() != n)
      bad_input(f.path(), ": tokenizer.ggml.token_type must be an integer array of ", n, " entries (one per token)");
    for (size_t i = 0; i < n; ++i) {
      const std::optional<int64_t> x = t->int_at(i);
      if (!x || *x < kNormal || *x > kByte)
        bad_input(f.path(), ": tokenizer.ggml.token_type[", i, "] must be 1..6 (normal, unknown, control, user-defined, unused, byte)");
      v.types[i] = int32_t(*x);
    }
  }
  return v;
}

// tokenizer.ggml.merges as [a, b] pairs; `required` refuses a file without them.
json read_merges(const GgufFile& f, bool required) {
  json merges = json::array();
  const GgufValue* m = f.find("tokenizer.ggml.merges");
  if (!m && required) bad_input(f.path(), ": metadata key 'tokenizer.ggml.merges' is missing (the BPE merges)");
  if (!m) return merges;
  if (!m->is_array() || m->elem_type() != GgufValueType::kString)
    bad_input(f.path(), ": tokenizer.ggml.merges must be an array of strings");
  for (const std::string& s : m->strings()) {
    const size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == s.size() || s.find(' ', space + 1) != std::string::npos)
      bad_input(f.path(), ": tokenizer.ggml.merges entry '", s, "' is not two tokens separated by one space");
    merges.push_back(json::array({s.substr(0, space), s.substr(space + 1)}));
  }
  return merges;
}

json added_token(size_t id, const std::string& text, bool special) {
  return {{"id", id}, {"content", text}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

bool padding(const std::string& token, int32_t type, size_t id, int32_t padding_type) {
  return type == padding_type && token == "[PAD" + std::to_string(id) + "]";
}

// tokenizer.json for tokenizer.ggml.model "gpt2".
json gpt2_document(const GgufFile& f, const GgufVocab& v) {
  const GgufValue* pre_value = f.find("tokenizer.ggml.pre");
  const std::string pre = pre_value && pre_value->str() ? *pre_value->str() : std::string("(none)");
  const char* pattern = split_pattern(pre);
  if (!pattern)
    unsupported(f.path(), ": tokenizer.ggml.pre '", pre,
                "' is not a pre-tokenizer kestrel knows (qwen2, qwen35); pass --tokenizer with the model's tokenizer.json");
  const std::vector<std::string>& tokens = *v.tokens;
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    switch (v.types[i]) {
      case kNormal:
      case kByte:
        vocab[tokens[i]] = i;
        break;
      case kControl:
      case kUserDefined:
        if (padding(tokens[i], v.types[i], i, kUserDefined)) break;
        added.push_back(added_token(i, tokens[i], v.types[i] == kControl));
        break;
      case kUnknown:
      case kUnused:
        break;  // byte-level BPE has no unknown token; unused ids decode to nothing
    }
  }
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  json doc = json::object();
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
                  {"merges", read_merges(f, false)}};
  return doc;
}

// Gemma 4's chat markers that llama.cpp's converter writes user-defined (special in tokenizer.json).
bool gemma_visible_marker(const std::string& t) {
  for (const char* m : {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|\"|>"})
    if (t == m) return true;
  return false;
}

bool flag(const GgufFile& f, const std::string& key, bool fallback) {
  const GgufValue* v = f.find(key);
  if (!v) return fallback;
  const std::optional<bool> b = v->to_bool();
  if (!b) bad_input(f.path(), ": ", key, " must be a boolean");
  return *b;
}

// tokenizer.json for tokenizer.ggml.model "gemma4".
json gemma4_document(const GgufFile& f, const GgufVocab& v) {
  if (const GgufValue* pre = f.find("tokenizer.ggml.pre"); pre && (!pre->str() || *pre->str() != "gemma4"))
    unsupported(f.path(), ": tokenizer.ggml.pre '", pre->str() ? *pre->str() : "(not a string)",
                "' with tokenizer.ggml.model 'gemma4' (only 'gemma4' or none)");
  if (flag(f, "tokenizer.ggml.add_space_prefix", false))
    unsupported(f.path(), ": tokenizer.ggml.add_space_prefix = true is not supported for tokenizer.ggml.model 'gemma4'");
  if (flag(f, "tokenizer.ggml.add_eos_token", false))
    unsupported(f.path(), ": tokenizer.ggml.add_eos_token = true is not supported for tokenizer.ggml.model 'gemma4'");
  const std::vector<std::string>& tokens = *v.tokens;
  const size_t n = tokens.size();
  size_t end = n;  // the padding "[PAD<id>]" (unused) closes the list
  while (end > 0 && padding(tokens[end - 1], v.types[end - 1], end - 1, kUnused)) --end;
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < end; ++i) {
    if (padding(tokens[i], v.types[i], i, kUnused))
      bad_input(f.path(), ": tokenizer.ggml.tokens[", i, "] is padding ('", tokens[i], "') before real tokens");
    auto [it, fresh] = vocab.emplace(tokens[i], i);
    if (!fresh)
      bad_input(f.path(), ": tokenizer.ggml.tokens lists '", tokens[i], "' twice (ids ", it.value().get<size_t>(), " and ", i, ")");
    if (v.types[i] == kControl || v.types[i] == kUnknown || v.types[i] == kUserDefined)
      added.push_back(added_token(i, tokens[i], v.types[i] != kUserDefined || gemma_visible_marker(tokens[i])));
  }
  json unk = nullptr;
  if (const std::optional<int32_t> id = token_id(f, "tokenizer.ggml.unknown_token_id", end)) unk = tokens[size_t(*id)];
  const std::string space = "\xE2\x96\x81";
  json doc = json::object();
  doc["version"] = "1.0";
  doc["added_tokens"] = std::move(added);
  doc["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}};
  doc["pre_tokenizer"] = nullptr;
  doc["decoder"] = {{"type", "Sequence"},
                    {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                                              {{"type", "ByteFallback"}},
                                              {{"type", "Fuse"}}})}};
  doc["model"] = {{"type", "BPE"},         {"dropout", nullptr},  {"unk_token", unk},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", true},
                  {"byte_fallback", true}, {"ignore_merges", false}, {"vocab", std::move(vocab)},
                  {"merges", read_merges(f, true)}};
  return doc;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& f) {
  const GgufValue& model = require(f, "tokenizer.ggml.model");
  if (!model.str()) bad_input(f.path(), ": tokenizer.ggml.model must be a string");
  const std::string kind = *model.str();
  if (kind != "gpt2" && kind != "gemma4")
    unsupported(f.path(), ": tokenizer.ggml.model '", kind,
                "' cannot be loaded yet (byte-level BPE 'gpt2' and Gemma's 'gemma4' only); pass --tokenizer with the model's tokenizer.json");
  const GgufVocab v = read_vocab(f);
  const json doc = kind == "gemma4" ? gemma4_document(f, v) : gpt2_document(f, v);
  const std::vector<std::string>& tokens = *v.tokens;
  const size_t n = tokens.size();

  std::unique_ptr<Impl> impl = parse_tokenizer(doc.dump(), {}, f.path());
  impl->bos = token_id(f, "tokenizer.ggml.bos_token_id", n);
  impl->eos = token_id(f, "tokenizer.ggml.eos_token_id", n);
  for (const auto& id : {impl->bos, impl->eos})
    if (id && (size_t(*id) >= impl->present.size() || !impl->present[size_t(*id)]))
      bad_input(f.path(), ": the bos/eos token id ", *id, " names no token ('", tokens[size_t(*id)], "')");
  // llama.cpp always adds the BOS for 'gemma4'; for 'gpt2' only when the file says so.
  if (flag(f, "tokenizer.ggml.add_bos_token", kind == "gemma4")) {
    if (!impl->bos) bad_input(f.path(), ": tokenizer.ggml.add_bos_token is true but there is no tokenizer.ggml.bos_token_id");
    impl->prefix_ids = {*impl->bos};
  }
  return Tokenizer(std::move(impl));
}

}  // namespace kestrel::tok

// Loads tokenizer.json: every section is checked against what kestrel implements, and anything
// else is refused by name ("<file>: pre_tokenizer type 'Whitespace' is not supported").
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_reader.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace kestrel::tok {
namespace {

using nlohmann::json;

struct Ctx {
  const std::string& name;  // file name for messages
};

const json* field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string get_string(const Ctx& c, const json& j, const char* key, const std::string& where) {
  const json* v = field(j, key);
  if (!v || !v->is_string()) bad_input(c.name, ": ", where, ".", key, " must be a string");
  return v->get<std::string>();
}

bool get_bool(const Ctx& c, const json& j, const char* key, const std::string& where, bool fallback) {
  const json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) bad_input(c.name, ": ", where, ".", key, " must be true or false");
  return v->get<bool>();
}

std::string type_of(const Ctx& c, const json& j, const std::string& where) {
  if (!j.is_object()) bad_input(c.name, ": ", where, " must be an object");
  return get_string(c, j, "type", where);
}

// {"String": s} or {"Regex": r}; returns (is_regex, text).
std::pair<bool, std::string> pattern_of(const Ctx& c, const json& j, const std::string& where) {
  const json* p = field(j, "pattern");
  if (!p || !p->is_object()) bad_input(c.name, ": ", where, ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
  if (const json* s = field(*p, "String"); s && s->is_string()) return {false, s->get<std::string>()};
  if (const json* r = field(*p, "Regex"); r && r->is_string()) return {true, r->get<std::string>()};
  bad_input(c.name, ": ", where, ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

// ---- normalizer --------------------------------------------------------------------------------

void parse_normalizer(const Ctx& c, const json& j, const std::string& where, std::vector<NormalizerStep>& steps) {
  std::string type = type_of(c, j, where);
  if (type == "Sequence") {
    const json* list = field(j, "normalizers");
    if (!list || !list->is_array()) bad_input(c.name, ": ", where, ".normalizers must be an array");
    for (size_t i = 0; i < list->size(); ++i) parse_normalizer(c, (*list)[i], cat(where, ".normalizers[", i, "]"), steps);
  } else if (type == "NFC") {
    steps.push_back({.kind = NormalizerStep::Kind::kNfc, .from = {}, .to = {}});
  } else if (type == "Replace") {
    auto [is_regex, from] = pattern_of(c, j, where);
    if (is_regex) unsupported(c.name, ": ", where, " Replace with a Regex pattern is not supported");
    if (from.empty()) bad_input(c.name, ": ", where, ".pattern is an empty string");
    steps.push_back({.kind = NormalizerStep::Kind::kReplace, .from = from, .to = get_string(c, j, "content", where)});
  } else {
    unsupported(c.name, ": ", where, " type '", type, "' is not supported (kestrel supports NFC, Replace, Sequence)");
  }
}

// ---- pre-tokenizer -----------------------------------------------------------------------------

void parse_pre_tokenizer(const Ctx& c, const json& j, const std::string& where, std::vector<SplitStep>& steps,
                         bool& byte_level) {
  std::string type = type_of(c, j, where);
  if (type == "Sequence") {
    const json* list = field(j, "pretokenizers");
    if (!list || !list->is_array()) bad_input(c.name, ": ", where, ".pretokenizers must be an array");
    for (size_t i = 0; i < list->size(); ++i) {
      parse_pre_tokenizer(c, (*list)[i], cat(where, ".pretokenizers[", i, "]"), steps, byte_level);
    }
  } else if (type == "Split") {
    auto [is_regex, pattern] = pattern_of(c, j, where);
    if (get_bool(c, j, "invert", where, false)) unsupported(c.name, ": ", where, ".invert = true is not supported");
    std::string behavior = get_string(c, j, "behavior", where);
    SplitStep step;
    if (behavior == "Isolated") step.behavior = SplitBehavior::kIsolated;
    else if (behavior == "Removed") step.behavior = SplitBehavior::kRemoved;
    else if (behavior == "MergedWithPrevious") step.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = SplitBehavior::kMergedWithNext;
    else unsupported(c.name, ": ", where, ".behavior '", behavior, "' is not supported");
    if (is_regex) {
      step.regex.emplace(pattern, cat(c.name, ": ", where));
    } else {
      if (pattern.empty()) bad_input(c.name, ": ", where, ".pattern is an empty string");
      step.literal = pattern;
    }
    if (byte_level) unsupported(c.name, ": ", where, " after a ByteLevel pre-tokenizer is not supported");
    steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    if (get_bool(c, j, "add_prefix_space", where, true)) {
      unsupported(c.name, ": ", where, " ByteLevel with add_prefix_space = true is not supported");
    }
    if (get_bool(c, j, "use_regex", where, true)) {
      unsupported(c.name, ": ", where, " ByteLevel with use_regex = true is not supported (write the regex as a Split)");
    }
    byte_level = true;
  } else {
    unsupported(c.name, ": ", where, " type '", type, "' is not supported (kestrel supports Split, ByteLevel, Sequence)");
  }
}

// ---- model -------------------------------------------------------------------------------------

Bpe parse_model(const Ctx& c, const json& j, bool byte_level, TokenizerJson& tj) {
  std::string type = type_of(c, j, "model");
  if (type != "BPE") unsupported(c.name, ": model type '", type, "' is not supported (kestrel supports BPE)");
  if (const json* d = field(j, "dropout"); d && !(d->is_number() && d->get<double>() == 0.0)) {
    unsupported(c.name, ": model.dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = field(j, key);
    if (v && !(v->is_string() && v->get<std::string>().empty())) {
      unsupported(c.name, ": model.", key, " is not supported");
    }
  }
  BpeParams p;
  p.what = c.name;
  p.byte_level = byte_level;
  p.byte_fallback = get_bool(c, j, "byte_fallback", "model", false);
  p.ignore_merges = get_bool(c, j, "ignore_merges", "model", false);
  p.fuse_unk = get_bool(c, j, "fuse_unk", "model", false);
  if (const json* unk = field(j, "unk_token")) {
    if (!unk->is_string()) bad_input(c.name, ": model.unk_token must be a string");
    p.unk_token = unk->get<std::string>();
  }
  if (byte_level && p.byte_fallback) unsupported(c.name, ": byte_fallback with a ByteLevel pre-tokenizer is not supported");

  if (!tj.vocab) {
    const json* vocab = field(j, "vocab");
    if (!vocab) bad_input(c.name, ": model.vocab is missing");
    bad_input(c.name, ": model.vocab must be an object mapping tokens to ids");
  }
  const auto& vocab = *tj.vocab;
  if (vocab.empty()) bad_input(c.name, ": model.vocab is empty");
  p.vocab.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id >= static_cast<int64_t>(vocab.size())) {
      bad_input(c.name, ": model.vocab['", token, "'] has id ", id, ", beyond the vocabulary of ", vocab.size(),
                " tokens (ids must be 0..", vocab.size() - 1, ")");
    }
    if (!p.vocab.emplace(token, static_cast<int32_t>(id)).second) {
      bad_input(c.name, ": model.vocab lists token '", token, "' twice");
    }
  }

  if (!tj.merges) bad_input(c.name, ": model.merges is missing or not an array");
  p.merges.reserve(tj.merges->size());
  for (size_t i = 0; i < tj.merges->size(); ++i) {
    auto& m = (*tj.merges)[i];
    if (!m.ok) bad_input(c.name, ": model.merges[", i, "] must be \"a b\" or [\"a\", \"b\"]");
    if (m.is_string) {
      const std::string& s = m.a;
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        bad_input(c.name, ": model.merges[", i, "] '", s, "' is not two tokens separated by one space");
      }
      p.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {
      p.merges.emplace_back(std::move(m.a), std::move(m.b));
    }
  }
  tj.merges.reset();
  if (p.byte_fallback) {
    for (const auto& [token, id] : p.vocab) {
      if (token.size() < 4 || token.compare(0, 3, "<0x") != 0 || token.back() != '>') continue;
      bool ok = token.size() == 6;
      for (size_t k = 3; ok && k < 5; ++k) ok = std::isxdigit(static_cast<unsigned char>(token[k])) && !std::islower(token[k]);
      if (!ok) bad_input(c.name, ": model.vocab token '", token, "' (id ", id, ") is not a valid byte token <0xNN> (two upper-case hex digits)");
    }
  }
  return Bpe(std::move(p));
}

// ---- added tokens, post-processor, decoder ---------------------------------------------------

std::vector<AddedToken> parse_added_tokens(const Ctx& c, const json& j) {
  std::vector<AddedToken> out;
  if (!j.is_array()) bad_input(c.name, ": added_tokens must be an array");
  for (size_t i = 0; i < j.size(); ++i) {
    std::string where = cat("added_tokens[", i, "]");
    const json& t = j[i];
    if (!t.is_object()) bad_input(c.name, ": ", where, " must be an object");
    const json* id = field(t, "id");
    if (!id || !id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > INT32_MAX) {
      bad_input(c.name, ": ", where, ".id must be a non-negative integer");
    }
    AddedToken a{.id = static_cast<int32_t>(id->get<int64_t>()),
                 .content = get_string(c, t, "content", where),
                 .special = get_bool(c, t, "special", where, false),
                 .lstrip = get_bool(c, t, "lstrip", where, false),
                 .rstrip = get_bool(c, t, "rstrip", where, false),
                 .normalized = get_bool(c, t, "normalized", where, false)};
    if (a.content.empty()) bad_input(c.name, ": ", where, ".content is empty");
    require_utf8(a.content, cat(c.name, ": ", where, ".content"));
    if (get_bool(c, t, "single_word", where, false)) {
      unsupported(c.name, ": ", where, " ('", a.content, "') has single_word = true, which is not supported");
    }
    out.push_back(std::move(a));
  }
  return out;
}

void parse_post_processor(const Ctx& c, const json& j, const std::string& where, Tokenizer::Impl& impl) {
  std::string type = type_of(c, j, where);
  if (type == "Sequence") {
    const json* list = field(j, "processors");
    if (!list || !list->is_array()) bad_input(c.name, ": ", where, ".processors must be an array");
    for (size_t i = 0; i < list->size(); ++i) parse_post_processor(c, (*list)[i], cat(where, ".processors[", i, "]"), impl);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets, which kestrel does not report.
  } else if (type == "TemplateProcessing") {
    const json* single = field(j, "single");
    const json* specials = field(j, "special_tokens");
    if (!single || !single->is_array()) bad_input(c.name, ": ", where, ".single must be an array");
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      std::string item_where = cat(where, ".single[", i, "]");
      if (const json* seq = item.is_object() ? field(item, "Sequence") : nullptr) {
        if (seen_sequence) bad_input(c.name, ": ", item_where, " is a second Sequence in a single template");
        seen_sequence = true;
        (void)seq;
      } else if (const json* sp = item.is_object() ? field(item, "SpecialToken") : nullptr) {
        std::string name = get_string(c, *sp, "id", item_where + ".SpecialToken");
        const json* entry = specials ? field(*specials, name.c_str()) : nullptr;
        const json* ids = entry ? field(*entry, "ids") : nullptr;
        if (!ids || !ids->is_array()) bad_input(c.name, ": ", item_where, " names special token '", name, "', which special_tokens does not define");
        for (const json& id : *ids) {
          if (!id.is_number_integer()) bad_input(c.name, ": ", where, ".special_tokens['", name, "'].ids must be integers");
          (seen_sequence ? impl.suffix_ids : impl.prefix_ids).push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
      } else {
        bad_input(c.name, ": ", item_where, " must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) bad_input(c.name, ": ", where, ".single has no Sequence");
  } else {
    unsupported(c.name, ": ", where, " type '", type, "' is not supported (kestrel supports TemplateProcessing, ByteLevel, Sequence)");
  }
}

struct DecoderSpec {
  std::vector<NormalizerStep> replaces;  // per-token Replace steps (kReplace only), in order
  bool byte_level = false;
  bool byte_fallback = false;
};

void parse_decoder(const Ctx& c, const json& j, const std::string& where, DecoderSpec& spec, bool& fused) {
  std::string type = type_of(c, j, where);
  if (fused) unsupported(c.name, ": ", where, " after a Fuse decoder is not supported");
  if (type == "Sequence") {
    const json* list = field(j, "decoders");
    if (!list || !list->is_array()) bad_input(c.name, ": ", where, ".decoders must be an array");
    for (size_t i = 0; i < list->size(); ++i) parse_decoder(c, (*list)[i], cat(where, ".decoders[", i, "]"), spec, fused);
  } else if (type == "ByteLevel") {
    if (spec.byte_level || spec.byte_fallback || !spec.replaces.empty()) {
      unsupported(c.name, ": ", where, " ByteLevel combined with other decoders is not supported");
    }
    spec.byte_level = true;
  } else if (type == "Replace") {
    auto [is_regex, from] = pattern_of(c, j, where);
    if (is_regex) unsupported(c.name, ": ", where, " Replace with a Regex pattern is not supported");
    if (from.empty()) bad_input(c.name, ": ", where, ".pattern is an empty string");
    if (spec.byte_level || spec.byte_fallback) unsupported(c.name, ": ", where, " Replace after ByteLevel or ByteFallback is not supported");
    spec.replaces.push_back({.kind = NormalizerStep::Kind::kReplace, .from = from, .to = get_string(c, j, "content", where)});
  } else if (type == "ByteFallback") {
    if (spec.byte_level) unsupported(c.name, ": ", where, " ByteFallback with ByteLevel is not supported");
    spec.byte_fallback = true;
  } else if (type == "Fuse") {
    fused = true;
  } else {
    unsupported(c.name, ": ", where, " type '", type, "' is not supported (kestrel supports ByteLevel, Replace, ByteFallback, Fuse, Sequence)");
  }
}

std::optional<int32_t> config_token(const json& config, const char* key, const Tokenizer::Impl& impl,
                                    const Ctx& c) {
  const json* v = field(config, key);
  if (!v) return std::nullopt;
  std::string name;
  if (v->is_string()) name = v->get<std::string>();
  else if (v->is_object() && field(*v, "content") && (*v)["content"].is_string()) name = (*v)["content"].get<std::string>();
  else bad_input(c.name, ": tokenizer_config.json ", key, " must be a string or {\"content\": ...}");
  auto it = impl.added_ids.find(name);
  if (it != impl.added_ids.end()) return it->second;
  auto jt = impl.bpe->vocab().find(name);
  if (jt != impl.bpe->vocab().end()) return jt->second;
  bad_input(c.name, ": tokenizer_config.json ", key, " '", name, "' is not a token of the vocabulary");
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  std::string out;
  size_t pos = 0, hit;
  while ((hit = s.find(from, pos)) != std::string::npos) {
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
  }
  out.append(s, pos);
  return out;
}

void build_decoder_tables(const Ctx& c, const DecoderSpec& spec, Tokenizer::Impl& impl) {
  size_t n = impl.tokens.size();
  impl.pieces.resize(n);
  impl.raw.assign(n, 0);
  impl.lossy = spec.byte_level;
  for (size_t id = 0; id < n; ++id) {
    if (!impl.present[id]) continue;
    std::string text = impl.tokens[id];
    for (const auto& r : spec.replaces) text = replace_all(std::move(text), r.from, r.to);
    if (spec.byte_level) {
      if (auto bytes = byte_level_decode(text)) text = std::move(*bytes);
      impl.raw[id] = 1;
    } else if (spec.byte_fallback && text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>' &&
               std::isxdigit(static_cast<unsigned char>(text[3])) && std::isxdigit(static_cast<unsigned char>(text[4]))) {
      text = std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
      impl.raw[id] = 1;
    }
    impl.pieces[id] = std::move(text);
  }
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> parse_tokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                                 const std::string& name) {
  Ctx c{name};
  TokenizerJson tj = read_tokenizer_json(tokenizer_json, name);
  const json& j = tj.dom;
  if (!j.is_object()) bad_input(name, ": the top level must be a JSON object");
  for (const char* key : {"truncation", "padding"}) {
    if (field(j, key)) unsupported(name, ": ", key, " is not supported (it must be null)");
  }
  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->name = name;

  std::vector<NormalizerStep> norm_steps;
  if (const json* n = field(j, "normalizer")) parse_normalizer(c, *n, "normalizer", norm_steps);
  impl->normalizer = Normalizer(std::move(norm_steps));

  std::vector<SplitStep> split_steps;
  bool byte_level = false;
  if (const json* p = field(j, "pre_tokenizer")) parse_pre_tokenizer(c, *p, "pre_tokenizer", split_steps, byte_level);
  impl->pre_tokenizer = PreTokenizer(std::move(split_steps));

  const json* model = field(j, "model");
  if (!model) bad_input(name, ": model is missing");
  impl->bpe.emplace(parse_model(c, *model, byte_level, tj));

  // Vocabulary by id: model tokens, then added tokens (which may extend it).
  const auto& vocab = impl->bpe->vocab();
  std::vector<AddedToken> added;
  if (const json* a = field(j, "added_tokens")) added = parse_added_tokens(c, *a);
  size_t n = vocab.size();
  for (const auto& a : added) {
    if (static_cast<size_t>(a.id) >= vocab.size() + added.size()) {
      bad_input(name, ": added token '", a.content, "' has id ", a.id, ", beyond the vocabulary (",
                vocab.size(), " model tokens + ", added.size(), " added tokens)");
    }
    n = std::max(n, static_cast<size_t>(a.id) + 1);
  }
  impl->tokens.assign(n, {});
  impl->present.assign(n, 0);
  impl->special.assign(n, 0);
  for (const auto& [token, id] : vocab) {
    if (impl->present[id]) {
      bad_input(name, ": model.vocab gives id ", id, " to both '", impl->tokens[id], "' and '", token, "'");
    }
    impl->tokens[id] = token;
    impl->present[id] = 1;
  }
  std::vector<uint8_t> added_seen(n, 0);
  for (const auto& a : added) {
    if (added_seen[a.id]) bad_input(name, ": added_tokens gives id ", a.id, " to two tokens (the second is '", a.content, "')");
    added_seen[a.id] = 1;
    if (impl->present[a.id] && impl->tokens[a.id] != a.content) {
      bad_input(name, ": added token '", a.content, "' has id ", a.id, ", which model.vocab gives to '",
                impl->tokens[a.id], "'");
    }
    impl->tokens[a.id] = a.content;
    impl->present[a.id] = 1;
    impl->special[a.id] = a.special;
    impl->added_ids.emplace(a.content, a.id);
  }
  impl->raw_added = AddedTokenMatcher(added, false);
  impl->normalized_added = AddedTokenMatcher(added, true);

  if (const json* p = field(j, "post_processor")) parse_post_processor(c, *p, "post_processor", *impl);
  for (int32_t id : impl->prefix_ids) {
    if (id < 0 || static_cast<size_t>(id) >= n || !impl->present[id]) bad_input(name, ": post_processor names token id ", id, ", which is not in the vocabulary");
  }
  for (int32_t id : impl->suffix_ids) {
    if (id < 0 || static_cast<size_t>(id) >= n || !impl->present[id]) bad_input(name, ": post_processor names token id ", id, ", which is not in the vocabulary");
  }

  const json* decoder = field(j, "decoder");
  if (!decoder) unsupported(name, ": a null decoder is not supported");
  DecoderSpec spec;
  bool fused = false;
  parse_decoder(c, *decoder, "decoder", spec, fused);
  build_decoder_tables(c, spec, *impl);

  if (!config_json.empty()) {
    Ctx cc{name};
    json config = json::parse(config_json, nullptr, false);
    if (config.is_discarded() || !config.is_object()) bad_input(name, ": tokenizer_config.json is not a JSON object");
    impl->bos = config_token(config, "bos_token", *impl, cc);
    impl->eos = config_token(config, "eos_token", *impl, cc);
  }
  return impl;
}

}  // namespace kestrel::tok

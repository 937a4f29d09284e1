#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace kestrel::tok {
namespace {

const char* kReplacement = "\xEF\xBF\xBD";

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  if (is_gguf_file(path)) return from_gguf(GgufFile::open(path));
  bool dir = is_directory(path);
  std::string file = dir ? path_join(path, "tokenizer.json") : path;
  if (!file_exists(file)) {
    bad_input("no tokenizer at ", path, dir ? " (the directory has no tokenizer.json)" : " (no such file)");
  }
  size_t slash = file.find_last_of('/');
  std::string config_file = path_join(slash == std::string::npos ? "." : file.substr(0, slash), "tokenizer_config.json");
  std::string config = file_exists(config_file) ? read_file(config_file) : std::string();
  return from_json(read_file(file), config, file);
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json, const std::string& name) {
  return Tokenizer(parse_tokenizer(tokenizer_json, config_json, name));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, EncodeOptions options) const {
  std::vector<int32_t> ids;
  encode_into(text, ids, options);
  return ids;
}

void Tokenizer::encode_into(std::string_view text, std::vector<int32_t>& out, EncodeOptions options) const {
  const Impl& m = *impl_;
  if (text.size() >= (size_t{1} << 31)) bad_input("text of ", text.size(), " bytes is too long to tokenize at once (limit 2 GiB)");
  require_utf8(text, "text");
  if (options.add_special_tokens) out.insert(out.end(), m.prefix_ids.begin(), m.prefix_ids.end());

  thread_local std::vector<Segment> raw_segments, norm_segments;
  thread_local std::vector<Span> pieces;
  thread_local std::string scratch;
  raw_segments.clear();
  if (m.raw_added.empty()) {
    if (!text.empty()) raw_segments.push_back({{0, static_cast<uint32_t>(text.size())}, -1});
  } else {
    m.raw_added.split(text, 0, raw_segments);
  }
  for (const Segment& seg : raw_segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
      continue;
    }
    std::string_view normalized = m.normalizer.apply(text.substr(seg.span.begin, seg.span.end - seg.span.begin), scratch);
    norm_segments.clear();
    if (m.normalized_added.empty()) {
      norm_segments.push_back({{0, static_cast<uint32_t>(normalized.size())}, -1});
    } else {
      m.normalized_added.split(normalized, 0, norm_segments);
    }
    for (const Segment& part : norm_segments) {
      if (part.id >= 0) {
        out.push_back(part.id);
        continue;
      }
      std::string_view sub = normalized.substr(part.span.begin, part.span.end - part.span.begin);
      m.pre_tokenizer.split(sub, pieces);
      for (const Span& p : pieces) m.bpe->encode_word(sub.substr(p.begin, p.end - p.begin), out);
    }
  }
  if (options.add_special_tokens) out.insert(out.end(), m.suffix_ids.begin(), m.suffix_ids.end());
}

std::string Tokenizer::decode(std::span<const int32_t> ids, DecodeOptions options) const {
  const Impl& m = *impl_;
  const auto n_ids = static_cast<int32_t>(m.tokens.size());
  if (m.lossy) {
    // ByteLevel: every piece is raw bytes; concatenate, then repair only if not valid UTF-8.
    std::string out;
    out.reserve(ids.size() * 4);
    for (int32_t id : ids) {
      if (id < 0 || id >= n_ids || !m.present[id]) {
        bad_input("token id ", id, " is not in the vocabulary of ", m.name, " (", n_ids, " ids)");
      }
      if (options.skip_special_tokens && m.special[id]) continue;
      out += m.pieces[id];
    }
    if (find_invalid_utf8(out) == std::string::npos) return out;
    std::string repaired;
    append_utf8_lossy(repaired, out);
    return repaired;
  }
  std::string out, run;  // run: raw bytes not yet converted
  out.reserve(ids.size() * 4);
  auto flush = [&] {
    if (run.empty()) return;
    if (m.lossy) {
      append_utf8_lossy(out, run);
    } else if (find_invalid_utf8(run) == std::string::npos) {
      out += run;
    } else {
      for (size_t i = 0; i < run.size(); ++i) out += kReplacement;  // ByteFallback: one per byte
    }
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= m.tokens.size() || !m.present[id]) {
      bad_input("token id ", id, " is not in the vocabulary of ", m.name, " (", m.tokens.size(), " ids)");
    }
    if (options.skip_special_tokens && m.special[id]) continue;
    if (m.raw[id]) {
      run += m.pieces[id];
    } else {
      flush();
      out += m.pieces[id];
    }
  }
  flush();
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  std::string key(token);
  if (auto it = impl_->added_ids.find(key); it != impl_->added_ids.end()) return it->second;
  if (auto it = impl_->bpe->vocab().find(key); it != impl_->bpe->vocab().end()) return it->second;
  return std::nullopt;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !impl_->present[id]) {
    bad_input("token id ", id, " is not in the vocabulary of ", impl_->name);
  }
  return impl_->tokens[id];
}

TokenPiece Tokenizer::piece(int32_t id) const {
  id_to_token(id);  // validates
  return {impl_->pieces[id], impl_->raw[id] != 0, impl_->special[id] != 0};
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

bool Tokenizer::lossy_bytes() const { return impl_->lossy; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }

// ---- streaming ---------------------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, DecodeOptions options)
    : tokenizer_(&tokenizer), options_(options) {}

std::string StreamDecoder::push(int32_t id) {
  TokenPiece p = tokenizer_->piece(id);
  std::string out;
  if (options_.skip_special_tokens && p.special) return out;
  if (p.raw_bytes) {
    pending_.append(p.bytes);
    size_t complete = complete_utf8_prefix(pending_);
    append_utf8_lossy(out, std::string_view(pending_).substr(0, complete));
    pending_.erase(0, complete);
    return out;
  }
  out = finish();
  out.append(p.bytes);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  if (pending_.empty()) return out;
  if (tokenizer_->lossy_bytes()) {
    append_utf8_lossy(out, pending_);
  } else {
    for (size_t i = 0; i < pending_.size(); ++i) out += kReplacement;
  }
  pending_.clear();
  return out;
}

}  // namespace kestrel::tok

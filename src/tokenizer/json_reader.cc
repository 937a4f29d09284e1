#include "tokenizer/json_reader.h"

#include "core/error.h"

namespace kestrel::tok {
namespace {

using nlohmann::json;

class Reader {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  Reader(TokenizerJson& out, const std::string& name) : out_(out), dom_(out.dom, false), name_(name) {}

  // ---- values
  bool null() { return value([&] { return dom_.null(); }, false); }
  bool boolean(bool v) { return value([&] { return dom_.boolean(v); }, false); }
  bool number_integer(number_integer_t v) {
    if (mode_ == Mode::kVocab && depth_ == 1) return vocab_entry(v);
    return value([&] { return dom_.number_integer(v); }, false);
  }
  bool number_unsigned(number_unsigned_t v) {
    if (mode_ == Mode::kVocab && depth_ == 1) return vocab_entry(static_cast<int64_t>(std::min<number_unsigned_t>(v, INT64_MAX)));
    return value([&] { return dom_.number_unsigned(v); }, false);
  }
  bool number_float(number_float_t v, const string_t& s) { return value([&] { return dom_.number_float(v, s); }, false); }
  bool binary(binary_t& v) { return value([&] { return dom_.binary(v); }, false); }
  bool string(string_t& v) {
    if (mode_ == Mode::kMerges) {
      if (depth_ == 1) {
        out_.merges->push_back({std::move(v), {}, true, true});
      } else if (depth_ == 2) {
        if (pair_size_ == 0) pair_.a = std::move(v);
        else if (pair_size_ == 1) pair_.b = std::move(v);
        ++pair_size_;
      } else {
        pair_ok_ = false;
      }
      return true;
    }
    return value([&] { return dom_.string(v); }, false);
  }

  // ---- containers
  bool start_object(std::size_t n) {
    if (mode_ != Mode::kNone) return nested(true);
    if (at("vocab")) {
      mode_ = Mode::kVocab;
      depth_ = 1;
      out_.vocab.emplace();
      return dom_.null();
    }
    path_.push_back({});
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    if (mode_ == Mode::kVocab && depth_ == 1) {
      key_ = std::move(k);
      return true;
    }
    if (mode_ != Mode::kNone) return true;
    path_.back() = k;
    return dom_.key(k);
  }
  bool end_object() {
    if (mode_ != Mode::kNone) return end_nested();
    path_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (mode_ != Mode::kNone) return nested(false);
    if (at("merges")) {
      mode_ = Mode::kMerges;
      depth_ = 1;
      out_.merges.emplace();
      return dom_.null();
    }
    path_.push_back("[]");
    return dom_.start_array(n);
  }
  bool end_array() {
    if (mode_ != Mode::kNone) return end_nested();
    path_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& e) {
    error_ = cat(name_, ": not valid JSON (", e.what(), ")");
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  enum class Mode { kNone, kVocab, kMerges };

  // The container about to start is the value of `member` inside the top-level "model" object.
  bool at(const char* member) const {
    return path_.size() == 2 && path_[0] == "model" && path_[1] == member;
  }

  template <typename Fn>
  bool value(Fn&& forward, bool) {
    if (mode_ == Mode::kNone) return forward();
    if (mode_ == Mode::kVocab && depth_ == 1) {
      error_ = cat(name_, ": model.vocab['", key_, "'] is not an integer id");
      return false;
    }
    if (mode_ == Mode::kMerges) {
      if (depth_ == 1) out_.merges->push_back({{}, {}, false, false});
      else pair_ok_ = false;
    }
    return true;
  }

  bool vocab_entry(int64_t id) {
    out_.vocab->emplace_back(std::move(key_), id);
    return true;
  }

  bool nested(bool object) {
    if (mode_ == Mode::kVocab && depth_ == 1) {
      error_ = cat(name_, ": model.vocab['", key_, "'] is not an integer id");
      return false;
    }
    if (mode_ == Mode::kMerges && depth_ == 1) {
      pair_ = {};
      pair_size_ = 0;
      pair_ok_ = !object;
    } else if (mode_ == Mode::kMerges) {
      pair_ok_ = false;
    }
    ++depth_;
    return true;
  }

  bool end_nested() {
    --depth_;
    if (mode_ == Mode::kMerges && depth_ == 1) {
      pair_.is_string = false;
      pair_.ok = pair_ok_ && pair_size_ == 2;
      out_.merges->push_back(std::move(pair_));
    }
    if (depth_ == 0) mode_ = Mode::kNone;
    return true;
  }

  TokenizerJson& out_;
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const std::string& name_;
  std::vector<std::string> path_;  // key (or "[]") of each open DOM container
  Mode mode_ = Mode::kNone;
  int depth_ = 0;                  // nesting inside the captured member (1 = its own level)
  std::string key_;                // the vocab key awaiting its id
  TokenizerJson::Merge pair_;
  int pair_size_ = 0;
  bool pair_ok_ = true;
  std::string error_;
};

}  // namespace

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& name) {
  TokenizerJson out;
  Reader reader(out, name);
  bool ok = json::sax_parse(text.begin(), text.end(), &reader, json::input_format_t::json, true);
  if (!ok || !reader.error().empty()) {
    bad_input(reader.error().empty() ? cat(name, ": not valid JSON") : reader.error());
  }
  return out;
}

}  // namespace kestrel::tok

// The BPE model on its own: the U+2581 cut that speeds up SentencePiece-style words changes no
// result, checked with the real Gemma 3 vocabulary on the whole corpus plus hard cases.
#include <gtest/gtest.h>

#include <fstream>

#include "tokenizer/bpe.h"
#include "tokenizer_test_util.h"

namespace kestrel::test {
namespace {

tok::BpeParams gemma_bpe_params() {
  std::ifstream in(tokenizer_dir("gemma3") + "/tokenizer.json");
  auto j = nlohmann::json::parse(in);
  const auto& model = j["model"];
  tok::BpeParams p{.vocab = model["vocab"].get<std::unordered_map<std::string, int32_t>>(),
                   .merges = {},
                   .byte_fallback = true,
                   .fuse_unk = true,
                   .unk_token = "<unk>"};
  for (const auto& m : model["merges"]) p.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
  return p;
}

std::string sentencepiece_spaces(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == ' ') out += "\xE2\x96\x81";
    else out += c;
  }
  return out;
}

TEST(TokenizerBpe, SpaceCutChangesNothing) {
  tok::BpeParams params = gemma_bpe_params();
  tok::BpeParams no_cut = params;
  no_cut.allow_space_cut = false;
  tok::Bpe cut(std::move(params)), whole(std::move(no_cut));
  std::vector<std::string> words;
  std::string corpus = kjv_prefix(200000);
  size_t start = 0;
  while (start < corpus.size()) {  // each line is one Gemma word (newlines are added tokens)
    size_t end = corpus.find('\n', start);
    if (end == std::string::npos) end = corpus.size();
    words.push_back(sentencepiece_spaces(corpus.substr(start, end - start)));
    start = end + 1;
  }
  for (const char* hard : {"a > </b> c", "x>  </y", "  lead and trail  ", "<p>  </p> >  <", "\xE4\xB8\xAD >  \xF0\xA0\x80\x81 z",
                           "tab\there  now", "     ", "a b c d e f g h i j k l m n o p q r s t u v w x y z"}) {
    words.push_back(sentencepiece_spaces(hard));
  }
  for (const std::string& w : words) {
    std::vector<int32_t> a, b;
    cut.encode_word(w, a);
    whole.encode_word(w, b);
    ASSERT_EQ(a, b) << w;
  }
}

}  // namespace
}  // namespace kestrel::test

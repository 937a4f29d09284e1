// A tokenizer and chat template read back from a GGUF file's tokenizer.ggml.* metadata: the real
// Qwen3 tokenizer, written by kestrel's converter (convert/tokenizer_meta.cc), must tokenize the
// fixture strings, the corpus and the rendered chats exactly as Hugging Face did, and render the
// same chats; metadata kestrel cannot use is refused by name.
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "convert/tokenizer_meta.h"
#include "core/error.h"
#include "core/files.h"
#include "io/gguf.h"
#include "tokenizer_test_util.h"

namespace kestrel::test {
namespace {

using tok::Tokenizer;
using ojson = nlohmann::ordered_json;

constexpr int64_t kQwen3Vocab = 151936;  // the model's vocabulary: 267 ids above the tokenizer's are padding
constexpr uint32_t kImEnd = 151645;

// A GGUF holding only metadata: the Qwen3 tokenizer as the converter writes it, then `edit`.
std::string write_tokenizer_gguf(const std::string& name, const std::function<void(GgufWriter&)>& edit = {}) {
  const std::string path = work_path(name);
  GgufWriter w(path);
  w.set("general.architecture", GgufValue::string("qwen3"));
  EXPECT_TRUE(add_tokenizer_metadata(w, tokenizer_dir("qwen3"), kQwen3Vocab, "qwen2"));
  w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(kImEnd));
  if (edit) edit(w);
  w.begin();
  w.finish();
  return path;
}

bool have_qwen3() {
  return file_exists(tokenizer_dir("qwen3") + "/tokenizer.json");
}

const Tokenizer& gguf_qwen3() {
  static const Tokenizer tok = Tokenizer::load(write_tokenizer_gguf("qwen3_tokenizer.gguf"));
  return tok;
}

TEST(TokenizerGguf, Qwen3StringsAndCorpusEncodeExactly) {
  if (!have_qwen3()) GTEST_SKIP() << "the Qwen3 tokenizer is missing: run scripts/setup.sh";
  const Tokenizer& tok = gguf_qwen3();
  const Tokenizer& ref = real_tokenizer("qwen3");
  EXPECT_EQ(tok.eos_id(), std::optional<int32_t>(kImEnd));
  EXPECT_EQ(tok.eos_id(), ref.eos_id());
  expect_same_as_fixture(tok, ref, "qwen3");
}

TEST(TokenizerGguf, Qwen3ChatTemplateRendersTheFixtureChats) {
  if (!have_qwen3()) GTEST_SKIP() << "the Qwen3 tokenizer is missing: run scripts/setup.sh";
  const std::string path = write_tokenizer_gguf("qwen3_chat.gguf");
  const chat::ChatTemplate tmpl = chat::ChatTemplate::load(path);
  int rendered = 0;
  // Key order matters to the templates (tool JSON is rendered as given): read it ordered.
  const ojson fixture = ojson::parse(read_file(data_path("fixtures/text/text_qwen3.json")));
  for (const auto& c : fixture["chats"]) {
    if (!c.contains("rendered")) continue;
    chat::ChatRequest req;
    req.messages = c["messages"];
    if (c.contains("tools")) req.tools = c["tools"];
    for (const auto& [k, v] : c["kwargs"].items()) {
      if (k == "add_generation_prompt") req.add_generation_prompt = v.get<bool>();
      else req.variables[k] = v;
    }
    const std::string text = tmpl.render(req);
    EXPECT_EQ(text, c["rendered"].get<std::string>());
    EXPECT_EQ(gguf_qwen3().encode(text), c["ids"].get<std::vector<int32_t>>());
    ++rendered;
  }
  EXPECT_GE(rendered, 5);
}

TEST(TokenizerGguf, AddBosTokenPrependsIt) {
  if (!have_qwen3()) GTEST_SKIP() << "the Qwen3 tokenizer is missing: run scripts/setup.sh";
  const std::string path = write_tokenizer_gguf("qwen3_bos.gguf", [](GgufWriter& w) {
    w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(151643));
    w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  });
  const Tokenizer tok = Tokenizer::load(path);
  EXPECT_EQ(tok.bos_id(), std::optional<int32_t>(151643));
  const std::vector<int32_t> plain = tok.encode("Hello");
  std::vector<int32_t> with = tok.encode("Hello", {.add_special_tokens = true});
  ASSERT_EQ(with.size(), plain.size() + 1);
  EXPECT_EQ(with[0], 151643);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerGguf, UnusableMetadataIsRefusedByName) {
  if (!have_qwen3()) GTEST_SKIP() << "the Qwen3 tokenizer is missing: run scripts/setup.sh";
  struct Case {
    const char* name;
    std::function<void(GgufWriter&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"spm.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.model", GgufValue::string("llama")); }, "tokenizer.ggml.model 'llama'"},
      {"pre.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.pre", GgufValue::string("llama-bpe")); }, "tokenizer.ggml.pre 'llama-bpe'"},
      {"types.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.token_type", GgufValue::i32s({1, 1})); }, "tokenizer.ggml.token_type must be"},
      {"merge.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.merges", GgufValue::strings({"a b", "ab"})); }, "merges entry 'ab'"},
      {"eos.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(1u << 30)); }, "tokenizer.ggml.eos_token_id"},
      {"tokens.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.tokens", GgufValue::i32s({1})); }, "tokenizer.ggml.tokens must be"},
  };
  for (const Case& c : cases) {
    const std::string path = write_tokenizer_gguf(c.name, c.edit);
    const std::string err = error_of([&] { Tokenizer::load(path); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(path), std::string::npos) << c.name << ": " << err;
  }
  // A file without any tokenizer metadata, and without a chat template.
  const std::string bare = work_path("bare.gguf");
  {
    GgufWriter w(bare);
    w.set("general.architecture", GgufValue::string("qwen3"));
    w.begin();
    w.finish();
  }
  EXPECT_NE(error_of([&] { Tokenizer::load(bare); }).find("'tokenizer.ggml.model' is missing"), std::string::npos);
  EXPECT_NE(error_of([&] { chat::ChatTemplate::load(bare); }).find("tokenizer.chat_template"), std::string::npos);
}

}  // namespace
}  // namespace kestrel::test

// Gemma's tokenizer through GGUF: the real Gemma 3 tokenizer.json (Gemma 4's is of the same kind),
// written as tokenizer.ggml.model "gemma4" by kestrel's converter (convert/tokenizer_meta.cc) and
// read back (tokenizer/tokenizer_gguf.cc), must tokenize the fixture strings, the corpus and the
// rendered chats exactly as Hugging Face did, and render the same chats. Metadata kestrel cannot
// use, and tokenizer.json shapes the metadata cannot hold, are refused by name.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

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

constexpr int64_t kModelVocab = 262208;  // Gemma 3's embedding rows: 63 ids past the tokenizer's 262145
constexpr uint32_t kEndOfTurn = 106;

// A GGUF holding only metadata: the Gemma tokenizer as the converter writes it, then `edit`.
std::string write_gemma_gguf(const std::string& name, const std::function<void(GgufWriter&)>& edit = {}) {
  const std::string path = work_path(name);
  GgufWriter w(path);
  w.set("general.architecture", GgufValue::string("gemma4"));
  EXPECT_TRUE(add_gemma4_tokenizer_metadata(w, tokenizer_dir("gemma3"), kModelVocab));
  if (edit) edit(w);
  w.begin();
  w.finish();
  return path;
}

bool have_gemma() { return file_exists(tokenizer_dir("gemma3") + "/tokenizer.json"); }

const std::string& gemma_path() {
  static const std::string path = write_gemma_gguf("gemma_tokenizer.gguf");
  return path;
}

const Tokenizer& gguf_gemma() {
  static const Tokenizer tok = Tokenizer::load(gemma_path());
  return tok;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerGgufGemma, MetadataIsLlamaCppsGemma4Layout) {
  if (!have_gemma()) GTEST_SKIP() << "the Gemma 3 tokenizer is missing: run scripts/setup.sh";
  const GgufFile f = GgufFile::open(gemma_path());
  EXPECT_EQ(*f.find("tokenizer.ggml.model")->str(), "gemma4");
  EXPECT_EQ(f.find("tokenizer.ggml.pre"), nullptr);  // llama.cpp implies it from the model
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  const GgufValue* scores = f.find("tokenizer.ggml.scores");
  ASSERT_EQ(tokens->size(), uint64_t(kModelVocab));
  ASSERT_EQ(types->size(), uint64_t(kModelVocab));
  ASSERT_EQ(scores->size(), uint64_t(kModelVocab));
  EXPECT_EQ(scores->float_at(1000), -1000.0);
  auto type_of = [&](int64_t id) { return *types->int_at(uint64_t(id)); };
  EXPECT_EQ(tokens->strings()[238], "<0x00>");
  EXPECT_EQ(type_of(238), 6);                   // byte
  EXPECT_EQ(type_of(2), 3);                     // <bos>: special added token, control
  EXPECT_EQ(type_of(107), 4);                   // "\n": added, not special
  EXPECT_EQ(type_of(168), 4);                   // "<table>": added, not special
  EXPECT_EQ(type_of(1000), 1);                  // a plain vocabulary token
  EXPECT_EQ(tokens->strings()[262144], "<image_soft_token>");
  EXPECT_EQ(tokens->strings()[262145], "[PAD262145]");
  EXPECT_EQ(type_of(262145), 5);                // padding: unused
  EXPECT_EQ(f.find("tokenizer.ggml.merges")->size(), 514906u);
  EXPECT_EQ(f.find("tokenizer.ggml.bos_token_id")->to_int(), std::optional<int64_t>(2));
  EXPECT_EQ(f.find("tokenizer.ggml.eos_token_id")->to_int(), std::optional<int64_t>(kEndOfTurn));
  EXPECT_EQ(f.find("tokenizer.ggml.unknown_token_id")->to_int(), std::optional<int64_t>(3));
  EXPECT_EQ(f.find("tokenizer.ggml.padding_token_id")->to_int(), std::optional<int64_t>(0));
  EXPECT_EQ(f.find("tokenizer.ggml.add_bos_token")->to_bool(), std::optional<bool>(true));
  EXPECT_EQ(f.find("tokenizer.ggml.add_space_prefix")->to_bool(), std::optional<bool>(false));
  ASSERT_NE(f.find("tokenizer.chat_template"), nullptr);
}

TEST(TokenizerGgufGemma, StringsAndCorpusEncodeExactly) {
  if (!have_gemma()) GTEST_SKIP() << "the Gemma 3 tokenizer is missing: run scripts/setup.sh";
  const Tokenizer& tok = gguf_gemma();
  const Tokenizer& ref = real_tokenizer("gemma3");
  EXPECT_EQ(tok.bos_id(), ref.bos_id());
  EXPECT_EQ(tok.eos_id(), std::optional<int32_t>(kEndOfTurn));
  EXPECT_EQ(tok.eos_id(), ref.eos_id());
  expect_same_as_fixture(tok, ref, "gemma3");
}

TEST(TokenizerGgufGemma, ChatTemplateRendersTheFixtureChats) {
  if (!have_gemma()) GTEST_SKIP() << "the Gemma 3 tokenizer is missing: run scripts/setup.sh";
  const chat::ChatTemplate tmpl = chat::ChatTemplate::load(gemma_path());
  const ojson fixture = ojson::parse(read_file(data_path("fixtures/text/text_gemma3.json")));
  int rendered = 0, refused = 0;
  for (const auto& c : fixture["chats"]) {
    chat::ChatRequest req;
    req.messages = c["messages"];
    if (c.contains("tools")) req.tools = c["tools"];
    for (const auto& [k, v] : c["kwargs"].items()) {
      if (k == "add_generation_prompt") req.add_generation_prompt = v.get<bool>();
      else req.variables[k] = v;
    }
    if (!c.contains("rendered")) {  // the template raises (a tool role), from the GGUF as from HF
      EXPECT_NE(error_of([&] { tmpl.render(req); }), "(no error)");
      ++refused;
      continue;
    }
    const std::string text = tmpl.render(req);
    EXPECT_EQ(text, c["rendered"].get<std::string>());
    EXPECT_EQ(gguf_gemma().encode(text), c["ids"].get<std::vector<int32_t>>());
    ++rendered;
  }
  EXPECT_GE(rendered, 5);
  EXPECT_GE(refused, 1);
}

TEST(TokenizerGgufGemma, UnusableMetadataIsRefusedByName) {
  if (!have_gemma()) GTEST_SKIP() << "the Gemma 3 tokenizer is missing: run scripts/setup.sh";
  struct Case {
    const char* name;
    std::function<void(GgufWriter&)> edit;
    const char* expect;
  };
  auto tokens_with = [](size_t at, const std::string& text) {
    const GgufFile f = GgufFile::open(gemma_path());
    std::vector<std::string> t = f.find("tokenizer.ggml.tokens")->strings();
    t[at] = text;
    return t;
  };
  const std::vector<std::string> dup = tokens_with(1000, "<bos>");
  const std::vector<std::string> pad = tokens_with(1000, "[PAD1000]");
  const std::vector<Case> cases = {
      {"g_pre.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.pre", GgufValue::string("llama-bpe")); }, "tokenizer.ggml.pre 'llama-bpe'"},
      {"g_space.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(true)); }, "add_space_prefix = true"},
      {"g_eos.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(true)); }, "add_eos_token = true"},
      {"g_merges.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.merges", GgufValue::i32s({1})); }, "tokenizer.ggml.merges must be"},
      {"g_unk.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(1u << 20)); }, "tokenizer.ggml.unknown_token_id"},
      {"g_types.gguf", [](GgufWriter& w) { w.set("tokenizer.ggml.token_type", GgufValue::i32s({1, 1})); }, "tokenizer.ggml.token_type must be"},
      {"g_dup.gguf", [&](GgufWriter& w) { w.set("tokenizer.ggml.tokens", GgufValue::strings(dup)); }, "lists '<bos>' twice (ids 2 and 1000)"},
      {"g_pad.gguf", [&](GgufWriter& w) {
         w.set("tokenizer.ggml.tokens", GgufValue::strings(pad));
         const GgufFile f = GgufFile::open(gemma_path());
         std::vector<int32_t> types;
         for (uint64_t i = 0; i < f.find("tokenizer.ggml.token_type")->size(); ++i)
           types.push_back(int32_t(*f.find("tokenizer.ggml.token_type")->int_at(i)));
         types[1000] = 5;
         w.set("tokenizer.ggml.token_type", GgufValue::i32s(types));
       }, "tokenizer.ggml.tokens[1000] is padding"},
  };
  for (const Case& c : cases) {
    const std::string path = write_gemma_gguf(c.name, c.edit);
    const std::string err = error_of([&] { Tokenizer::load(path); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(path), std::string::npos) << c.name << ": " << err;
  }
  // No merges at all.
  const std::string bare = work_path("g_nomerges.gguf");
  {
    GgufWriter w(bare);
    w.set("tokenizer.ggml.model", GgufValue::string("gemma4"));
    w.set("tokenizer.ggml.tokens", GgufValue::strings({"<pad>", "a"}));
    w.begin();
    w.finish();
  }
  EXPECT_NE(error_of([&] { Tokenizer::load(bare); }).find("'tokenizer.ggml.merges' is missing"), std::string::npos);
}

// A small SentencePiece-style tokenizer.json (Gemma's shape: <bos>, a, b, ab, the 256 byte tokens), then `edit`, in its own directory.
std::string write_tokenizer_dir(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const std::string space = "\xE2\x96\x81";
  nlohmann::json t = {
      {"version", "1.0"},
      {"added_tokens", {{{"id", 0}, {"content", "<bos>"}, {"special", true}, {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"single_word", false}}}},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}}},
      {"pre_tokenizer", nullptr},
      {"post_processor", {{"type", "TemplateProcessing"},
                          {"single", {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                          {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {0}}, {"tokens", {"<bos>"}}}}}}}},
      {"decoder", {{"type", "Sequence"},
                   {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}}},
      {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"fuse_unk", true}, {"unk_token", nullptr},
                 {"vocab", {{"<bos>", 0}, {"a", 1}, {"b", 2}, {"ab", 3}}}, {"merges", nlohmann::json::array({nlohmann::json::array({"a", "b"})})}}}};
  char byte[8];
  for (int b = 0; b < 256; ++b) {  // byte fallback needs every <0xNN>
    std::snprintf(byte, sizeof byte, "<0x%02X>", b);
    t["model"]["vocab"][byte] = 4 + b;
  }
  edit(t);
  const std::string dir = work_path(name);
  std::filesystem::create_directories(dir);
  write_file_atomic(dir + "/tokenizer.json", t.dump());
  return dir;
}

TEST(TokenizerGgufGemma, TokenizersTheMetadataCannotHoldAreRefusedByName) {
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&)> edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"g_tok_ok", [](nlohmann::json&) {}, "(no error)"},
      {"g_tok_norm", [](nlohmann::json& t) { t["normalizer"] = {{"type", "NFC"}}; }, "normalizer must replace ' ' with U+2581"},
      {"g_tok_pre", [](nlohmann::json& t) { t["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre_tokenizer must be null or a Split"},
      {"g_tok_fallback", [](nlohmann::json& t) { t["model"]["byte_fallback"] = false; }, "must be BPE with byte_fallback"},
      {"g_tok_decoder", [](nlohmann::json& t) { t["decoder"] = {{"type", "ByteLevel"}}; }, "decoder must be Replace"},
      {"g_tok_lstrip", [](nlohmann::json& t) { t["added_tokens"][0]["lstrip"] = true; }, "'<bos>' has lstrip = true"},
      {"g_tok_merge", [](nlohmann::json& t) { t["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a b", "b"})}); }, "has a space"},
      {"g_tok_post", [](nlohmann::json& t) {
         t["post_processor"]["single"].push_back({{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}});
       }, "post_processor"},
  };
  for (const Case& c : cases) {
    const std::string dir = write_tokenizer_dir(c.name, c.edit);
    const std::string err = error_of([&] {
      GgufWriter w(work_path(std::string(c.name) + ".gguf"));
      add_gemma4_tokenizer_metadata(w, dir, 260);
      w.begin();
      w.finish();
    });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
  }
  // The accepted one reads back and merges.
  const Tokenizer tok = Tokenizer::load(work_path("g_tok_ok.gguf"));
  EXPECT_EQ(tok.encode("ab", {.add_special_tokens = true}), (std::vector<int32_t>{0, 3}));
}

}  // namespace
}  // namespace kestrel::test

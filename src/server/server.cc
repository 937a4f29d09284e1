#include "server/server.h"

#include <httplib.h>

#include <chrono>
#include <ctime>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "server/api_error.h"
#include "server/completion_stream.h"
#include "server/metrics_text.h"

namespace kestrel::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using namespace std::chrono_literals;

struct Server::Impl {
  ServerOptions opt;
  httplib::Server http;
  std::mutex model_mu;
  std::shared_ptr<ServedModel> model;  // null while loading
  MetricsText metrics;
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> stopping{false};
  int port = 0;

  std::shared_ptr<ServedModel> current() {
    std::lock_guard<std::mutex> lock(model_mu);
    return model;
  }
};

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body(), "application/json");
}

std::string make_id(const char* prefix, uint64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, (unsigned long long)(n * 0x9e3779b97f4a7c15ull));
  return buf;
}

json tool_calls_json(const std::vector<chat::ToolCall>& calls, size_t first_index, uint64_t id_seed) {
  json arr = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    arr.push_back({{"index", first_index + i},
                   {"id", make_id("call", id_seed * 131 + first_index + i)},
                   {"type", "function"},
                   {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}});
  }
  return arr;
}

// Completions-API logprobs from chat-format entries.
json legacy_logprobs(const json& entries) {
  json tokens = json::array(), lps = json::array(), tops = json::array();
  for (const auto& e : entries) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    json t = json::object();
    for (const auto& x : e["top_logprobs"]) t[x["token"].get<std::string>()] = x["logprob"];
    tops.push_back(t);
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}};
}

}  // namespace

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  Impl& I = *impl_;
  const int threads = I.opt.http_threads > 0 ? I.opt.http_threads : I.opt.max_concurrent + 8;
  I.http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  I.http.set_payload_max_length(I.opt.max_body_bytes);
  I.http.set_read_timeout(30, 0);
  I.http.set_write_timeout(30, 0);

  // Authentication and CORS before routing. /health stays open.
  I.http.set_pre_routing_handler([&I](const httplib::Request& req, httplib::Response& res) {
    if (!I.opt.cors_origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", I.opt.cors_origin);
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      if (req.method == "OPTIONS") {
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (!I.opt.api_key.empty() && req.path != "/health") {
      const std::string auth = req.get_header_value("Authorization");
      if (auth != "Bearer " + I.opt.api_key) {
        send_error(res, {401, auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "invalid API key",
                         "authentication_error", "", "invalid_api_key"});
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  I.http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const Error& e) {
      const int status = e.kind() == ErrorKind::kBadInput || e.kind() == ErrorKind::kUnsupported ? 400 : 500;
      send_error(res, {status, e.what(), status == 400 ? "invalid_request_error" : "server_error"});
    } catch (const std::exception& e) {
      send_error(res, {500, e.what(), "server_error"});
    }
  });
  I.http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, {404, "no route for " + req.method + " " + req.path, "not_found_error"});
    else if (res.status == 413) send_error(res, {413, "request body too large", "invalid_request_error"});
    else if (res.status >= 400) send_error(res, {res.status, "request failed", "invalid_request_error"});
  });

  I.http.Get("/health", [&I](const httplib::Request&, httplib::Response& res) {
    const auto m = I.current();
    const std::string fault = m ? m->scheduler->fault() : std::string();
    if (!fault.empty()) {
      res.status = 503;
      res.set_content(nlohmann::json{{"status", "failed"}, {"error", fault}}.dump(), "application/json");
    } else if (I.stopping) {
      res.status = 503;
      res.set_content(R"({"status":"stopping"})", "application/json");
    } else if (!m) {
      res.status = 503;
      res.set_content(R"({"status":"loading"})", "application/json");
    } else {
      res.set_content(R"({"status":"ok"})", "application/json");
    }
  });

  auto need_model = [&I]() -> std::shared_ptr<ServedModel> {
    auto m = I.current();
    if (!m) throw_api(503, "the model is still loading", "", "service_unavailable");
    if (I.stopping) throw_api(503, "the server is shutting down", "", "service_unavailable");
    return m;
  };
  auto check_model_name = [](const ojson& body, const ServedModel& m) {
    if (body.contains("model") && !body["model"].is_null()) {
      if (!body["model"].is_string()) throw_api(400, "'model' must be a string", "model");
      const std::string name = body["model"].get<std::string>();
      if (name != m.name) throw_api(404, "model '" + name + "' is not served here (serving '" + m.name + "')", "model",
                                    "invalid_request_error", "model_not_found");
    }
  };

  I.http.Get("/v1/models", [&I, need_model](const httplib::Request&, httplib::Response& res) {
    auto m = need_model();
    json data = json::array({{{"id", m->name}, {"object", "model"}, {"created", 0}, {"owned_by", "kestrel"},
                              {"max_model_len", m->scheduler->max_prompt_tokens()}}});
    res.set_content(json({{"object", "list"}, {"data", data}}).dump(), "application/json");
  });

  I.http.Get("/metrics", [this, &I](const httplib::Request&, httplib::Response& res) {
    auto m = I.current();
    if (!m) {
      res.set_content("# model loading\n", "text/plain; version=0.0.4");
      return;
    }
    res.set_content(I.metrics.render(*m->scheduler, m->name, in_flight_, I.rejected), "text/plain; version=0.0.4");
  });

  I.http.Post("/tokenize", [need_model, check_model_name](const httplib::Request& req, httplib::Response& res) {
    auto m = need_model();
    ojson body = parse_body(req.body);
    check_model_name(body, *m);
    std::string text;
    if (body.contains("messages")) {
      if (!m->chat_template) throw_api(400, "this model has no chat template", "messages");
      chat::ChatRequest cr;
      cr.messages = validate_messages(body["messages"]);
      cr.add_generation_prompt = body.value("add_generation_prompt", true);
      text = m->chat_template->render(cr);
    } else if (body.contains("prompt") && body["prompt"].is_string()) {
      text = body["prompt"].get<std::string>();
    } else {
      throw_api(400, "give 'prompt' (a string) or 'messages'", "prompt");
    }
    const bool special = body.value("add_special_tokens", !body.contains("messages"));
    auto ids = m->tokenizer->encode(text, {.add_special_tokens = special});
    res.set_content(json({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", m->scheduler->max_prompt_tokens()}}).dump(),
                    "application/json");
  });

  I.http.Post("/detokenize", [need_model](const httplib::Request& req, httplib::Response& res) {
    auto m = need_model();
    ojson body = parse_body(req.body);
    if (!body.contains("tokens") || !body["tokens"].is_array()) throw_api(400, "'tokens' must be an array of token ids", "tokens");
    std::vector<int32_t> ids;
    for (const auto& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= m->tokenizer->vocab_size())
        throw_api(400, "'tokens' holds " + t.dump() + ", not a token id below " + std::to_string(m->tokenizer->vocab_size()),
                  "tokens");
      ids.push_back(int32_t(t.get<int64_t>()));
    }
    res.set_content(json({{"prompt", m->tokenizer->decode(ids)}}).dump(), "application/json");
  });

  // ---- generation ----
  auto generate = [this, &I, need_model, check_model_name](const httplib::Request& req, httplib::Response& res, bool chat) {
    auto m = need_model();
    ojson body = parse_body(req.body);
    check_model_name(body, *m);
    const int64_t vocab = m->loaded.config().vocab_size;
    GenerationParams params = parse_generation_params(body, I.opt.limits, vocab, chat);
    std::vector<int32_t> prompt;
    bool starts_in_reasoning = false;
    if (chat) {
      if (!m->chat_template) throw_api(400, "this model has no chat template: use /v1/completions", "messages");
      if (!body.contains("messages")) throw_api(400, "'messages' is required", "messages");
      chat::ChatRequest cr;
      cr.messages = validate_messages(body["messages"]);
      if (body.contains("tools") && !body["tools"].is_null()) {
        validate_tools(body["tools"]);
        cr.tools = body["tools"];
      }
      if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
        const auto& tc = body["tool_choice"];
        if (!(tc.is_string() && (tc == "auto" || tc == "none")))
          throw_api(400, "'tool_choice' other than \"auto\" or \"none\" is not supported", "tool_choice");
        if (tc == "none") cr.tools = nullptr;
      }
      cr.add_generation_prompt = true;
      if (body.contains("add_generation_prompt")) {
        if (!body["add_generation_prompt"].is_boolean()) throw_api(400, "'add_generation_prompt' must be a boolean", "add_generation_prompt");
        cr.add_generation_prompt = body["add_generation_prompt"].get<bool>();
      }
      if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
        if (!body["chat_template_kwargs"].is_object())
          throw_api(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs");
        cr.variables = body["chat_template_kwargs"];
      }
      std::string text;
      try {
        text = m->chat_template->render(cr);
      } catch (const Error& e) {
        throw_api(400, std::string("chat template: ") + e.what(), "messages");
      }
      prompt = m->tokenizer->encode(text, {.add_special_tokens = false});
      starts_in_reasoning = chat::prompt_opens_reasoning(m->output_format, text);
    } else {
      if (!body.contains("prompt")) throw_api(400, "'prompt' is required", "prompt");
      const auto& p = body["prompt"];
      if (p.is_string()) {
        prompt = m->tokenizer->encode(p.get<std::string>(), {.add_special_tokens = true});
      } else if (p.is_array() && !p.empty() && p[0].is_number_integer()) {
        for (const auto& t : p) {
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
            throw_api(400, "'prompt' holds " + t.dump() + ", not a token id below " + std::to_string(vocab), "prompt");
          prompt.push_back(int32_t(t.get<int64_t>()));
        }
      } else {
        throw_api(400, "'prompt' must be a string or an array of token ids", "prompt");
      }
    }
    if (prompt.empty()) throw_api(400, "the prompt is empty", chat ? "messages" : "prompt");
    const int64_t limit = std::min<int64_t>(I.opt.limits.max_prompt_tokens, m->scheduler->max_prompt_tokens() - 1);
    if (int64_t(prompt.size()) > limit)
      throw_api(400, "the prompt has " + std::to_string(prompt.size()) + " tokens; the limit is " + std::to_string(limit),
                chat ? "messages" : "prompt", "invalid_request_error", "context_length_exceeded");
    if (int64_t(prompt.size()) + params.options.max_tokens > m->scheduler->max_prompt_tokens())
      throw_api(400, "prompt (" + std::to_string(prompt.size()) + " tokens) plus max_tokens (" +
                         std::to_string(params.options.max_tokens) + ") exceeds the context of " +
                         std::to_string(m->scheduler->max_prompt_tokens()) + " tokens",
                "max_tokens", "invalid_request_error", "context_length_exceeded");
    if (!params.options.ignore_eos)
      params.options.stop_token_ids.insert(params.options.stop_token_ids.end(), m->stop_ids.begin(), m->stop_ids.end());

    // admission: a fast 429 past the concurrency limit
    if (in_flight_.fetch_add(1) >= I.opt.max_concurrent) {
      in_flight_.fetch_sub(1);
      ++I.rejected;
      res.set_header("Retry-After", "1");
      throw_api(429, "too many concurrent requests; retry later", "", "rate_limit_error");
    }
    struct InFlight {  // held until the response (streamed or not) is complete
      explicit InFlight(std::atomic<int>& counter) : n(counter) {}
      InFlight(const InFlight&) = delete;
      InFlight& operator=(const InFlight&) = delete;
      ~InFlight() { n.fetch_sub(1); }
      std::atomic<int>& n;
    };
    auto guard = std::make_shared<InFlight>(in_flight_);

    std::vector<std::unique_ptr<ChoiceStream>> choices;
    for (int i = 0; i < params.n; ++i) {
      RequestOptions o = params.options;
      o.sampling.seed += uint64_t(i);
      if (const std::string fault = m->scheduler->fault(); !fault.empty()) throw_api(503, fault, "", "service_unavailable");
      auto r = m->scheduler->submit(prompt, o);
      if (!r) {
        for (auto& c : choices) c->request()->cancel();
        ++I.rejected;
        res.set_header("Retry-After", "1");
        throw_api(429, "the request queue is full; retry later", "", "rate_limit_error");
      }
      choices.push_back(std::make_unique<ChoiceStream>(*m, r, params, chat, starts_in_reasoning));
    }
    const uint64_t serial = I.next_id++;
    const std::string id = make_id(chat ? "chatcmpl" : "cmpl", serial);
    const int64_t created = int64_t(std::time(nullptr));
    const size_t n_prompt = prompt.size();

    auto usage = [&choices, n_prompt]() {
      int completion = 0;
      for (auto& c : choices) completion += c->completion_tokens();
      return json({{"prompt_tokens", n_prompt}, {"completion_tokens", completion}, {"total_tokens", n_prompt + size_t(completion)},
                   {"prompt_tokens_details", {{"cached_tokens", choices[0]->request()->cached_tokens()}}}});
    };

    if (!params.stream) {
      std::vector<ChoiceDelta> all(choices.size());
      for (size_t i = 0; i < choices.size(); ++i) {
        while (!choices[i]->poll(100ms, all[i])) {
        }
      }
      json out_choices = json::array();
      for (size_t i = 0; i < choices.size(); ++i) {
        if (choices[i]->finish_reason() == "error")
          throw_api(500, "generation failed: " + choices[i]->error(), "", "server_error");
        json c = {{"index", i}, {"finish_reason", choices[i]->finish_reason()}};
        if (chat) {
          json msg = {{"role", "assistant"}, {"content", all[i].content}};
          if (!all[i].reasoning.empty()) msg["reasoning_content"] = all[i].reasoning;
          if (!all[i].tool_calls.empty()) {
            json calls = tool_calls_json(all[i].tool_calls, 0, serial);
            for (auto& x : calls) x.erase("index");
            msg["tool_calls"] = calls;
          }
          c["message"] = msg;
          c["logprobs"] = params.logprobs ? json({{"content", all[i].logprobs}}) : json(nullptr);
        } else {
          c["text"] = all[i].content;
          c["logprobs"] = params.logprobs ? legacy_logprobs(all[i].logprobs) : json(nullptr);
        }
        out_choices.push_back(c);
      }
      json out = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created},
                  {"model", m->name}, {"choices", out_choices}, {"usage", usage()}};
      const std::string note = choices[0]->request()->prefix_note();
      if (!note.empty()) out["kestrel"] = {{"prefix_cache", note}};
      res.set_content(out.dump(), "application/json");
      return;
    }

    // ---- streaming (server-sent events) ----
    auto shared = std::make_shared<std::vector<std::unique_ptr<ChoiceStream>>>(std::move(choices));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [&I, shared, params, chat, id, created, m, guard, serial, n_prompt](size_t, httplib::DataSink& sink) {
         try {
          auto& cs = *shared;
          auto send = [&](const json& j) {
            const std::string s = "data: " + j.dump() + "\n\n";
            return sink.write(s.data(), s.size());
          };
          auto chunk = [&](json choices_arr) {
            return json({{"id", id}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
                         {"model", m->name}, {"choices", std::move(choices_arr)}});
          };
          auto cancel_all = [&] {
            for (auto& c : cs) c->request()->cancel();
          };
          std::vector<size_t> tool_index(cs.size(), 0);
          if (chat) {
            json first = json::array();
            for (size_t i = 0; i < cs.size(); ++i)
              first.push_back({{"index", i}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                               {"finish_reason", nullptr}});
            if (!send(chunk(first))) {
              cancel_all();
              return false;
            }
          }
          auto last_write = std::chrono::steady_clock::now();
          std::vector<bool> done(cs.size(), false);
          size_t n_done = 0;
          while (n_done < cs.size()) {
            bool wrote = false;
            for (size_t i = 0; i < cs.size(); ++i) {
              if (done[i]) continue;
              ChoiceDelta d;
              const bool fin = cs[i]->poll(cs.size() == 1 ? 50ms : 5ms, d);
              if (!d.empty() || fin) {
                json c = {{"index", i}};
                if (chat) {
                  json delta = json::object();
                  if (!d.content.empty()) delta["content"] = d.content;
                  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
                  if (!d.tool_calls.empty()) {
                    delta["tool_calls"] = tool_calls_json(d.tool_calls, tool_index[i], serial);
                    tool_index[i] += d.tool_calls.size();
                  }
                  c["delta"] = delta;
                  c["logprobs"] = params.logprobs && !d.logprobs.empty() ? json({{"content", d.logprobs}}) : json(nullptr);
                } else {
                  c["text"] = d.content;
                  c["logprobs"] = params.logprobs && !d.logprobs.empty() ? legacy_logprobs(d.logprobs) : json(nullptr);
                }
                c["finish_reason"] = fin ? json(cs[i]->finish_reason()) : json(nullptr);
                if (fin && cs[i]->finish_reason() == "error") c["error"] = cs[i]->error();
                if (!send(chunk(json::array({c})))) {
                  cancel_all();  // the client went away: abort within one step
                  return false;
                }
                wrote = true;
              }
              if (fin) {
                done[i] = true;
                ++n_done;
              }
            }
            const auto now = std::chrono::steady_clock::now();
            if (wrote) {
              last_write = now;
            } else if (std::chrono::duration<double>(now - last_write).count() >= I.opt.keepalive_seconds) {
              static const std::string ka = ": keep-alive\n\n";
              if (!sink.write(ka.data(), ka.size())) {
                cancel_all();
                return false;
              }
              last_write = now;
            }
          }
          if (params.include_usage) {
            int completion = 0;
            for (auto& c : cs) completion += c->completion_tokens();
            json u = chunk(json::array());
            u["usage"] = {{"prompt_tokens", n_prompt}, {"completion_tokens", completion},
                          {"total_tokens", n_prompt + size_t(completion)},
                          {"prompt_tokens_details", {{"cached_tokens", cs[0]->request()->cached_tokens()}}}};
            if (!send(u)) return false;
          }
          static const std::string fin = "data: [DONE]\n\n";
          sink.write(fin.data(), fin.size());
          sink.done();
          return true;
         } catch (const std::exception& e) {
          // Nothing may escape a stream: the failure ends this response only, as an error event.
          for (auto& c : *shared) c->request()->cancel();
          const std::string ev = "data: " + json({{"error", {{"message", e.what()}, {"type", "server_error"}}}}).dump() + "\n\n";
          sink.write(ev.data(), ev.size());
          sink.done();
          return true;
         }
        },
        [shared](bool success) {
          if (!success) {
            for (auto& c : *shared) c->request()->cancel();
          }
        });
  };
  I.http.Post("/v1/chat/completions",
              [generate](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
  I.http.Post("/v1/completions",
              [generate](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& I = *impl_;
  if (I.opt.port == 0) {
    I.port = I.http.bind_to_any_port(I.opt.host);
  } else {
    I.port = I.http.bind_to_port(I.opt.host, I.opt.port) ? I.opt.port : -1;
  }
  if (I.port <= 0) fail(ErrorKind::kIo, "cannot listen on ", I.opt.host, ":", I.opt.port, " (address in use or not allowed?)");
  return I.port;
}

void Server::listen() { impl_->http.listen_after_bind(); }

void Server::set_model(std::unique_ptr<ServedModel> model) {
  model->scheduler->start();
  std::lock_guard<std::mutex> lock(impl_->model_mu);
  impl_->model = std::move(model);
}

void Server::stop() {
  Impl& I = *impl_;
  if (I.stopping.exchange(true)) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(I.opt.drain_seconds);
  while (in_flight_ > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  if (auto m = I.current()) {
    if (in_flight_ > 0) {
      // past the drain timeout: cancel what is left so handlers return
      m->scheduler->stop();
    }
  }
  I.http.stop();
  if (auto m = I.current()) m->scheduler->stop();
}

}  // namespace kestrel::server

// The OpenAI-compatible HTTP server (cpp-httplib):
//   POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
//   GET /metrics, POST /tokenize, POST /detokenize.
// The model loads after the socket is open, so /health answers 503 until it is ready.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "server/openai_request.h"
#include "server/served_model.h"

namespace httplib {
class Server;
}

namespace kestrel::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;            // empty: no authentication
  std::string cors_origin;        // empty: no CORS headers
  size_t max_body_bytes = 8u << 20;
  int max_concurrent = 64;        // generation requests in flight; more get 429
  int http_threads = 0;           // 0: max_concurrent + 8
  double keepalive_seconds = 2.0; // SSE comment while a stream has nothing to say
  double drain_seconds = 30.0;    // on stop: how long in-flight requests may finish
  ServerLimits limits;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Binds the socket (Error naming host:port on failure); returns the bound port.
  int bind();
  // Serves on the calling thread until stop(). Call bind() first.
  void listen();
  // Installs the model (from any thread) and flips /health to 200.
  void set_model(std::unique_ptr<ServedModel> model);
  // Stops accepting, lets in-flight requests finish (up to drain_seconds), stops the scheduler.
  void stop();
  int in_flight() const { return in_flight_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<int> in_flight_{0};
};

}  // namespace kestrel::server

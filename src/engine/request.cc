#include "engine/request.h"

namespace kestrel {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

FinishReason Request::wait(std::vector<TokenOut>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || finish_ != FinishReason::kNone; });
  for (auto& t : pending_) out.push_back(std::move(t));
  pending_.clear();
  return finish_;
}

std::string Request::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::string Request::prefix_note() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prefix_note_;
}

void Request::on_admitted(int cached_tokens, std::string note) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    prefix_note_ = std::move(note);
  }
  cached_tokens_ = cached_tokens;
  admitted_ = true;
}

void Request::push(TokenOut token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(token));
  }
  cv_.notify_all();
}

void Request::finish(FinishReason reason, std::string error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finish_ != FinishReason::kNone) return;
    finish_ = reason;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace kestrel

// A compiled Jinja template and its renderer.
//
//   chat::Template t(source);                 // syntax errors: Error(kBadInput) with line, column
//   Map vars; vars.set("messages", ...);
//   std::string text = t.render(vars, {.max_steps = 1'000'000});
//
// Rendering runs in transformers' chat-template environment: trim_blocks, lstrip_blocks, the
// loopcontrols extension (break/continue), `{% generation %}` blocks, the globals raise_exception,
// strftime_now, range, namespace and dict, and transformers' tojson. It is bounded (RenderBounds):
// a template that loops without end, recurses, or builds huge values stops with a clear error.
// A Template is immutable and may be rendered from several threads at once.
#pragma once

#include <memory>
#include <string>

#include "chat/builtins.h"
#include "chat/value.h"

namespace kestrel::chat {

struct Node;

class Template {
 public:
  explicit Template(const std::string& source);
  std::string render(const Map& variables, const RenderBounds& bounds = {}) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const Node> root_;
};

}  // namespace kestrel::chat

#include "cli/command.h"

#include <algorithm>

namespace kestrel::cli {

static std::vector<Command>& registry() {
  static std::vector<Command> list;
  return list;
}

Registrar::Registrar(Command command) {
  auto& list = registry();
  list.push_back(std::move(command));
  std::sort(list.begin(), list.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
}

const std::vector<Command>& commands() { return registry(); }

}  // namespace kestrel::cli

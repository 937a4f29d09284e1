#include "model/registry.h"

#include <algorithm>

namespace kestrel {

static std::vector<Architecture>& archs() {
  static std::vector<Architecture> list;
  return list;
}

ArchRegistrar::ArchRegistrar(Architecture arch) { archs().push_back(std::move(arch)); }

const Architecture* find_architecture(const std::string& model_type) {
  for (const auto& a : archs()) {
    if (std::find(a.model_types.begin(), a.model_types.end(), model_type) != a.model_types.end()) return &a;
  }
  return nullptr;
}

std::vector<std::string> supported_model_types() {
  std::vector<std::string> out;
  for (const auto& a : archs()) out.insert(out.end(), a.model_types.begin(), a.model_types.end());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kestrel

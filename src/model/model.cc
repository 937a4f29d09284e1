#include "model/model.h"

namespace kestrel {

void Model::capture_hidden(HiddenCapture* capture, const Tensor& x) {
  if (!capture) return;
  std::vector<float> host(size_t(x.numel()));
  ops_.to_host(x, host.data());
  capture->layers.push_back(std::move(host));
}

}  // namespace kestrel

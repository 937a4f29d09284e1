// Comparisons of logits the tests share.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace kestrel::test {

// max |a - b| over the RMS of b, the reference (a and b the same size; the caller checks).
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0, ss = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
    ss += double(b[i]) * b[i];
  }
  return m / std::sqrt(ss / double(std::max<size_t>(b.size(), 1)));
}

}  // namespace kestrel::test

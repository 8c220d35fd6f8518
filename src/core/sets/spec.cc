#include "core/sets/spec.h"

#include <algorithm>
#include <sstream>

namespace hvd {

int32_t HostHash(const std::string& identity) {
  // FNV-1a, folded to 31 bits: equal on the ranks of one host, distinct
  // across hosts in all but astronomically unlucky cases.
  uint32_t h = 2166136261u;
  for (unsigned char c : identity) h = (h ^ c) * 16777619u;
  return static_cast<int32_t>(h & 0x7fffffffu);
}

std::string ListText(const int32_t* v, size_t n) {
  std::ostringstream os;
  os << "[";
  const size_t shown = std::min<size_t>(n, 16);
  for (size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << v[i];
  if (n > shown) os << ", ... (" << n << " ranks)";
  os << "]";
  return os.str();
}

}  // namespace hvd

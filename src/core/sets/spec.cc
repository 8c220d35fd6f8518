#include "core/sets/spec.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <utility>

#include "hvd.h"

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

namespace {

// How errors quote rank r's call.
std::string Describe(const SetSpecs& s, int r) {
  const int32_t* v = s.spec[r];
  if (s.len[r] >= 3 && v[0] == kSpecList) {
    return "hvd_process_set_create " + ListText(v + 3, s.len[r] - 3);
  }
  if (s.len[r] >= 4 && v[0] == kSpecSplit) {
    return "hvd_context_split (color " + std::to_string(v[2]) + ", key " + std::to_string(v[3]) + ")";
  }
  return std::string("a malformed request");
}

// Well formed, and the same kind of call on every rank.
Status CheckKinds(const SetSpecs& s, const std::string& what) {
  const int n = s.ranks();
  const auto& spec = s.spec;
  const auto& len = s.len;
  for (int r = 0; r < n; ++r) {
    const bool ok = (len[r] >= 3 && spec[r][0] == kSpecList &&
                     len[r] == 3 + static_cast<size_t>(std::max(spec[r][2], 0))) ||
                    (len[r] == 4 && spec[r][0] == kSpecSplit);
    if (!ok) return Error(HVD_ERR_INTERNAL, what + ": rank " + std::to_string(r) + " sent a malformed request");
  }
  for (int r = 1; r < n; ++r) {
    if (spec[r][0] != spec[0][0]) {
      return Error(HVD_ERR_MISMATCH, "ranks disagree on the " + what + ": rank 0 called " +
                                         Describe(s, 0) + ", rank " + std::to_string(r) + " called " +
                                         Describe(s, r));
    }
  }
  return Status::Ok();
}

// A rank list: valid on every rank, and the same everywhere.
Result<std::vector<std::vector<int>>> ListGroups(const SetSpecs& s, const std::string& what) {
  const int n = s.ranks();
  const auto& spec = s.spec;
  const auto& len = s.len;
  for (int r = 0; r < n; ++r) {
    const int32_t* v = spec[r] + 3;
    const size_t m = len[r] - 3;
    std::string bad;
    if (m == 0) bad = "it is empty";
    for (size_t i = 0; i < m && bad.empty(); ++i) {
      if (v[i] < 0 || v[i] >= n) {
        bad = "rank " + std::to_string(v[i]) + " is out of range (the context has " +
              std::to_string(n) + " ranks)";
      } else if (i > 0 && v[i] == v[i - 1]) {
        bad = "it lists rank " + std::to_string(v[i]) + " twice";
      } else if (i > 0 && v[i] < v[i - 1]) {
        bad = "it is not sorted ascending";
      }
    }
    if (!bad.empty()) {
      return Error(HVD_ERR_INVALID_ARGUMENT, "rank " + std::to_string(r) +
                                                 " passed the process-set rank list " +
                                                 ListText(v, m) + ": " + bad);
    }
  }
  for (int r = 1; r < n; ++r) {
    if (len[r] != len[0] || !std::equal(spec[r] + 3, spec[r] + len[r], spec[0] + 3)) {
      return Error(HVD_ERR_MISMATCH, "ranks disagree on the process set's ranks (" + what +
                                         "): rank 0 listed " + ListText(spec[0] + 3, len[0] - 3) +
                                         ", rank " + std::to_string(r) + " listed " +
                                         ListText(spec[r] + 3, len[r] - 3));
    }
  }
  std::vector<std::vector<int>> groups;
  groups.emplace_back(spec[0] + 3, spec[0] + len[0]);
  return groups;
}

// A split: one group per color, ordered by (key, rank).
Result<std::vector<std::vector<int>>> SplitGroups(const SetSpecs& s) {
  const int n = s.ranks();
  std::map<int32_t, std::vector<std::pair<int32_t, int>>> by_color;
  for (int r = 0; r < n; ++r) {
    const int32_t color = s.spec[r][2];
    if (color < 0 && color != HVD_UNDEFINED_COLOR) {
      return Error(HVD_ERR_INVALID_ARGUMENT,
                   "rank " + std::to_string(r) + " passed color " + std::to_string(color) +
                       " to hvd_context_split (a color is >= 0, or HVD_UNDEFINED_COLOR)");
    }
    if (color >= 0) by_color[color].emplace_back(s.spec[r][3], r);
  }
  std::vector<std::vector<int>> groups;
  for (auto& [color, v] : by_color) {
    std::sort(v.begin(), v.end());
    groups.emplace_back();
    for (const auto& kr : v) groups.back().push_back(kr.second);
  }
  return groups;
}

}  // namespace

Result<std::vector<std::vector<int>>> GroupsOf(const SetSpecs& s, const std::string& what) {
  HVD_CHECK(CheckKinds(s, what));
  if (s.spec[0][0] == kSpecList) return ListGroups(s, what);
  return SplitGroups(s);
}

SetPlace PlaceInGroup(const std::vector<int>& g, const std::vector<int32_t>& hosts, int me) {
  std::vector<int> local_of(g.size());
  for (size_t j = 0; j < g.size(); ++j) {
    int before = 0;
    for (size_t q = 0; q < j; ++q) before += hosts[g[q]] == hosts[g[j]] ? 1 : 0;
    local_of[j] = before;
  }
  SetPlace p;
  p.local_rank = local_of[me];
  for (size_t j = 0; j < g.size(); ++j) {
    if (hosts[g[j]] == hosts[g[me]]) ++p.local_size;
    if (local_of[j] == p.local_rank) {
      if (static_cast<int>(j) < me) ++p.cross_rank;
      ++p.cross_size;
    }
  }
  return p;
}

std::string SetLabel(const std::vector<int>& g) {
  std::ostringstream os;
  os << "set [";
  for (size_t j = 0; j < g.size() && j < 16; ++j) os << (j ? ", " : "") << g[j];
  if (g.size() > 16) os << ", ... (" << g.size() << " ranks)";
  os << "]";
  return os.str();
}

}  // namespace hvd

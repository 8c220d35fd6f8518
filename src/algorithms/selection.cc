// Which algorithm a collective runs (selection.h).
#include "algorithms/selection.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <vector>

namespace hvd {
namespace algo {

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kNative: return "native";
    case Algorithm::kShm: return "shm";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kChain: return "chain";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kDissemination: return "dissemination";
  }
  return "?";
}

namespace {

std::vector<Algorithm> P2pAlgorithms(int collective) {
  switch (collective) {
    case HVD_TRANSPORT_ALLREDUCE: return {Algorithm::kDirect, Algorithm::kRing};
    case HVD_TRANSPORT_REDUCESCATTER: return {Algorithm::kRing};
    case HVD_TRANSPORT_ALLGATHERV: return {Algorithm::kRing};
    case HVD_TRANSPORT_BROADCAST: return {Algorithm::kTree, Algorithm::kChain};
    case HVD_TRANSPORT_ALLTOALLV: return {Algorithm::kPairwise};
    case HVD_TRANSPORT_BARRIER: return {Algorithm::kDissemination};
    default: return {};
  }
}

// Collectives the shared-memory path serves (alltoallv is not one).
bool ShmServes(int collective) { return collective != HVD_TRANSPORT_ALLTOALLV; }

}  // namespace

bool IsP2pAlgorithm(int collective, Algorithm a) {
  const auto all = P2pAlgorithms(collective);
  return std::find(all.begin(), all.end(), a) != all.end();
}

std::string AlgorithmsOf(int collective) {
  std::string s = "auto, native";
  if (ShmServes(collective)) s += ", shm";
  for (Algorithm a : P2pAlgorithms(collective)) s += std::string(", ") + AlgorithmName(a);
  return s;
}

Result<Algorithm> ParseAlgorithm(int collective, const std::string& setting,
                                 const std::string& value) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.empty() || v == "auto") return Algorithm::kAuto;
  if (v == "native") return Algorithm::kNative;
  if (v == "shm" && ShmServes(collective)) return Algorithm::kShm;
  for (Algorithm a : P2pAlgorithms(collective)) {
    if (v == AlgorithmName(a)) return a;
  }
  return InvalidArgument(setting + "='" + value + "' is not an algorithm of this collective (one of: " +
                         AlgorithmsOf(collective) + ")");
}

bool OrderMatters(int collective, hvd_dtype_t dtype) {
  return (collective == HVD_TRANSPORT_ALLREDUCE || collective == HVD_TRANSPORT_REDUCESCATTER) &&
         (dtype == HVD_FLOAT16 || dtype == HVD_BFLOAT16 || dtype == HVD_FLOAT32 ||
          dtype == HVD_FLOAT64);
}

Algorithm ChooseAllreduce(int size, size_t bytes) {
  // Direct sends (size - 1) copies: worth its single latency while that
  // stays small.
  constexpr size_t kDirectFanoutBytes = size_t{64} << 10;
  if (size <= 1) return Algorithm::kDirect;
  return bytes <= kDirectFanoutBytes / static_cast<size_t>(size - 1) ? Algorithm::kDirect
                                                                     : Algorithm::kRing;
}

Algorithm ChooseBroadcast(int size, size_t bytes, size_t segment_bytes) {
  // The tree sends the whole message log2(size) times in sequence; the chain
  // pipelines segments, so beyond one segment it wins from 3 ranks on.
  return (size <= 2 || bytes <= segment_bytes) ? Algorithm::kTree : Algorithm::kChain;
}

Algorithm ChooseP2p(int c, size_t bytes, const Links& links) {
  switch (c) {
    case HVD_TRANSPORT_ALLREDUCE: return ChooseAllreduce(links.size(), bytes);
    case HVD_TRANSPORT_BROADCAST: return ChooseBroadcast(links.size(), bytes, links.segment_bytes());
    case HVD_TRANSPORT_ALLTOALLV: return Algorithm::kPairwise;
    case HVD_TRANSPORT_BARRIER: return Algorithm::kDissemination;
    default: return Algorithm::kRing;
  }
}

Algorithm Choose(int c, size_t bytes, const Choice& w) {
  if (w.forced != Algorithm::kAuto) return w.forced;
  if (w.shm && ShmServes(c)) return Algorithm::kShm;
  // Every rank must choose alike: alltoallv's size differs per rank, so
  // only "always" counts there.
  const bool within =
      c == HVD_TRANSPORT_ALLTOALLV ? w.native_max_bytes == SIZE_MAX : bytes <= w.native_max_bytes;
  // A native reduction keeps its library's order (MPI's depends on the
  // message size): the core's algorithms where the order matters.
  if (w.native && (w.links == nullptr || (within && !w.ordered))) return Algorithm::kNative;
  return ChooseP2p(c, bytes, *w.links);
}

Algorithm ChooseInSet(int c, size_t bytes, Algorithm forced, bool shm, const Links& links) {
  if (forced == Algorithm::kShm && shm) return forced;
  if (forced != Algorithm::kAuto && forced != Algorithm::kShm && forced != Algorithm::kNative) {
    return forced;
  }
  if (shm && ShmServes(c)) return Algorithm::kShm;
  return ChooseP2p(c, bytes, links);
}

}  // namespace algo
}  // namespace hvd

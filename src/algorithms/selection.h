// Which algorithm a collective runs: one ordered list of checks, the same
// on every rank (the choice depends on the arguments and on settings every
// rank shares). Forced settings (HVD_ALGORITHM_<COLLECTIVE>) first, then
// the shared-memory path where every rank shares a host, then the plugin's
// native entry up to its native_max_bytes, then the core's algorithms over
// point-to-point (collectives.h).
#pragma once

#include <cstddef>
#include <string>

#include "algorithms/links.h"
#include "common/status.h"
#include "hvd_transport.h"

namespace hvd {
namespace algo {

enum class Algorithm { kAuto, kNative, kShm, kDirect, kRing, kTree, kChain, kPairwise, kDissemination };
const char* AlgorithmName(Algorithm a);
// "ring" -> kRing ...; "auto" or "" -> kAuto; else an error naming the
// setting and the names allowed for that collective (HVD_TRANSPORT_* index).
Result<Algorithm> ParseAlgorithm(int collective, const std::string& setting, const std::string& value);
// The algorithms (over point-to-point) a collective has, for messages.
std::string AlgorithmsOf(int collective);
// Whether a is one of collective's point-to-point algorithms.
bool IsP2pAlgorithm(int collective, Algorithm a);

// Whether a reduction's bits depend on the order its contributions are
// combined in (floating dtypes of allreduce and reducescatter): such a
// reduction runs the core's algorithms, which all give the canonical order
// (docs/reproducibility.md), never a native entry that gives no such order.
bool OrderMatters(int collective, hvd_dtype_t dtype);

// The default choice for allreduce over point-to-point.
Algorithm ChooseAllreduce(int size, size_t bytes);
Algorithm ChooseBroadcast(int size, size_t bytes, size_t segment_bytes);
// The default algorithm over point-to-point for collective c (HVD_TRANSPORT_*).
Algorithm ChooseP2p(int c, size_t bytes, const Links& links);

// What a whole transport offers collective c.
struct Choice {
  Algorithm forced = Algorithm::kAuto;  // the setting (kAuto: none)
  bool shm = false;                     // the shared-memory path runs
  bool native = false;                  // the plugin has a native entry
  size_t native_max_bytes = 0;          // hvd_transport_info_t.native_max_bytes[c]
  const Links* links = nullptr;         // point-to-point, or null
  bool ordered = false;                 // OrderMatters: no native unless forced or alone
};
Algorithm Choose(int c, size_t bytes, const Choice& what);
// A process set's choice: the forced algorithm where a set can run it
// (natives span the plugin's whole communicator), else shared memory, else
// point-to-point.
Algorithm ChooseInSet(int c, size_t bytes, Algorithm forced, bool shm, const Links& links);

}  // namespace algo
}  // namespace hvd

// What a process-set request carries: the specification every rank
// allgathers, the groups it forms (checked alike on every rank), a member's
// place in its group, and the text errors quote it with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace hvd {


// The specification a process-set request allgathers (int32 each):
// [kind, host, ...]: kind 0 (a rank list): n, ranks...; kind 1 (split):
// color, key. host: a hash of this rank's host identity (local ranks).
constexpr int32_t kSpecList = 0;
constexpr int32_t kSpecSplit = 1;

// FNV-1a of a host identity, folded to 31 bits (the spec's host field).
int32_t HostHash(const std::string& identity);

// "[0, 2, 5]" (at most 16 ranks shown).
std::string ListText(const int32_t* v, size_t n);

// Every rank's specification as the request allgathered it: rank r's
// int32s at spec[r], len[r] of them.
struct SetSpecs {
  std::vector<const int32_t*> spec;
  std::vector<size_t> len;
  int ranks() const { return static_cast<int>(spec.size()); }
};

// The groups a process-set request forms, ranks of the context in each
// group's order: a rank list gives one group, a split one per color in
// ascending order, each ordered by (key, rank). Every rank's spec is
// checked: well formed (else HVD_ERR_INTERNAL), the same kind and the same
// list everywhere (else HVD_ERR_MISMATCH, quoting both ranks' calls), a
// valid list or color (else HVD_ERR_INVALID_ARGUMENT, naming the rank).
// `what` names the call in the messages.
Result<std::vector<std::vector<int>>> GroupsOf(const SetSpecs& s, const std::string& what);

// A member's place in a group: its local ranks are the members on its host
// (by the specs' host field), in the group's order; its cross ranks the
// members with its local rank (Horovod's definition).
struct SetPlace {
  int local_rank = 0, local_size = 0, cross_rank = 0, cross_size = 0;
};
SetPlace PlaceInGroup(const std::vector<int>& group, const std::vector<int32_t>& hosts, int me);

// A set's timeline rows: "set [0, 2]" (at most 16 ranks shown).
std::string SetLabel(const std::vector<int>& group);

}  // namespace hvd

// What a process-set request carries: the specification every rank
// allgathers, and the text errors quote it with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

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

}  // namespace hvd

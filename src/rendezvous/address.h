// Addresses for the rendezvous store's sockets.
#pragma once

#include <string>

namespace hvd::rdv::detail {

// The numeric local address of a connected socket ("" if unknown).
std::string NumericAddress(int fd);

}  // namespace hvd::rdv::detail

// Naming a peer in messages: "rank 2 (host h)", from every rank's host name
// (the core's host table, env.hosts).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "hvd_transport.h"

namespace hvd::kit {

// Every rank's host name from the env's host table ("" where it names none,
// or where an env without one came).
inline std::vector<std::string> HostNames(const hvd_transport_env_t& env) {
  std::vector<std::string> names(static_cast<size_t>(env.size > 0 ? env.size : 0));
  if (env.struct_size < offsetof(hvd_transport_env_t, hosts) + sizeof(env.hosts) ||
      env.hosts == nullptr) {
    return names;
  }
  for (size_t r = 0; r < names.size(); ++r) {
    if (env.hosts[r].name != nullptr) names[r] = env.hosts[r].name;
  }
  return names;
}

// "rank 2", "rank 2 (host h)", "rank 2 (host h, [ip]:port)" or "rank 2
// ([ip]:port)": the host where known, the address where given.
inline std::string Who(const std::vector<std::string>& hosts, int r,
                       const std::string& addr = std::string()) {
  std::string s = "rank " + std::to_string(r);
  const std::string host = r >= 0 && r < static_cast<int>(hosts.size()) ? hosts[r] : "";
  if (host.empty() && addr.empty()) return s;
  s += " (";
  if (!host.empty()) s += "host " + host + (addr.empty() ? "" : ", ");
  return s + addr + ")";
}

// "rank 1 (host a)" for the one peer of two ranks, else "a peer among ranks
// 1 (host a), 2 (host b)": every rank but `rank` (the first 8 named, then
// how many in all).
inline std::string AmongPeers(const std::vector<std::string>& hosts, int rank, int size) {
  constexpr int kMaxNamed = 8;
  if (size == 2) return Who(hosts, 1 - rank);
  std::string s = "a peer among ranks ";
  int n = 0;
  for (int r = 0; r < size && n < kMaxNamed; ++r) {
    if (r == rank) continue;
    s += (n++ ? ", " : "") + Who(hosts, r).substr(5);  // without "rank "
  }
  if (size - 1 > kMaxNamed) s += ", ... (" + std::to_string(size - 1) + " in all)";
  return s;
}

}  // namespace hvd::kit

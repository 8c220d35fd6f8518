// The default host transport across hosts: where no transport was named
// and the job spans more than one host, UCX when every rank can load its
// plugin (its TCP path costs a fraction of Gloo's per message: see
// docs/transports.md), else Gloo. One host keeps Gloo: the collectives
// take the shared-memory path there whatever the transport.
//
// The ranks agree through the host table: each rank's host entry carries
// the transports it can load (HostFlags), read back by LearnHosts, so every
// rank decides from the same table.
#include <set>

#include "core/bootstrap/bootstrap.h"

namespace hvd {

namespace {
constexpr char kUcx[] = "ucx";
}  // namespace

// Whether the default may still pick UCX for this job: nothing named, more
// than one rank.
bool Bootstrap::DefaultOpen(const std::string& transport) const {
  return host_request_.empty() && transport == "gloo" && cfg_->size > 1;
}

// This rank's flags for its host entry: "ucx" where the plugin and libucp
// load here (the reason it does not is kept for the log); nothing where
// the launcher said the job is on one host (no plugin loaded for it).
std::string Bootstrap::HostFlags(const std::string& transport) {
  if (!DefaultOpen(transport) || cfg_->cross_size == 1) return "";
  const Status s = Transport::Check(kUcx, cfg_->transport_path);
  if (s.ok()) return kUcx;
  no_ucx_ = s.message();
  return "";
}

// After LearnHosts: "ucx" in place of the default "gloo" where the host
// table holds more than one host and every rank's flags say "ucx". Logs
// the choice and why (INFO on rank 0; a rank that cannot load UCX says why
// on its own log).
std::string Bootstrap::ChooseAcrossHosts(const std::string& transport) const {
  if (!DefaultOpen(transport)) return transport;
  const std::set<std::string> hosts(hosts_.begin(), hosts_.end());
  if (hosts.size() < 2) {
    if (cfg_->rank == 0) {
      HVD_LOG(*log_, HVD_LOG_INFO,
              "transport gloo chosen: one host (the collectives take shared memory)");
    }
    return transport;
  }
  int without = flags_.empty() ? 0 : -1;
  for (size_t r = 0; r < flags_.size(); ++r) {
    if (flags_[r] != kUcx) {
      without = static_cast<int>(r);
      break;
    }
  }
  if (without < 0 && flags_.size() == static_cast<size_t>(cfg_->size)) {
    if (cfg_->rank == 0) {
      HVD_LOG(*log_, HVD_LOG_INFO,
              "transport ucx chosen: the job spans " << hosts.size()
                  << " hosts and every rank loads UCX (HVD_TRANSPORT=gloo keeps Gloo)");
    }
    return kUcx;
  }
  if (!no_ucx_.empty()) {
    HVD_LOG(*log_, HVD_LOG_INFO, "rank " << cfg_->rank << " (host " << cfg_->hostname
                                         << ") cannot load UCX: " << no_ucx_);
  }
  if (cfg_->rank == 0) {
    HVD_LOG(*log_, HVD_LOG_INFO,
            "transport gloo chosen: the job spans "
                << hosts.size() << " hosts, but rank " << without << " (host "
                << hosts_[static_cast<size_t>(without)]
                << ") cannot load UCX, the faster transport across hosts");
  }
  return transport;
}

}  // namespace hvd

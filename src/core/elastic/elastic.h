// An elastic job's worker side (docs/elastic.md, "Protocol"): the launcher
// (hvdrun) decides membership; a worker asks to join an epoch and is told its
// rank and size there. One ElasticMember per root context, kept across the
// context's resets; it has its own store connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "core/config/config.h"
#include "core/observability/logging.h"
#include "rendezvous/store.h"

namespace hvd {

class ElasticMember {
 public:
  struct Assignment {
    int64_t epoch = 0;
    int rank = 0;
    int size = 1;
    int64_t hosts_version = 0;
  };

  // Connects to the job's store (cfg: rendezvous_addr, secret, elastic_worker;
  // within the start timeout).
  static Result<std::unique_ptr<ElasticMember>> Connect(const Config& cfg);

  // Asks to join the next epoch and waits (at most the elastic timeout) for
  // the launcher's answer. HVD_ERR_MEMBERSHIP_CHANGED with the launcher's
  // reason when it ends this worker's part in the job instead.
  Result<Assignment> Join();

  // Whether the launcher changed the hosts since the last assignment.
  Result<bool> HostsUpdated();

  // The last assignment (epoch -1 before the first).
  const Assignment& current() const { return current_; }

 private:
  ElasticMember(std::unique_ptr<rdv::StoreClient> client, const Config& cfg)
      : client_(std::move(client)), worker_(cfg.elastic_worker), hostname_(cfg.hostname),
        timeout_s_(cfg.elastic_timeout_s), log_(cfg.log_level, cfg.log_fn, cfg.log_user) {
    current_.epoch = -1;
  }

  std::unique_ptr<rdv::StoreClient> client_;
  std::string worker_;
  std::string hostname_;
  double timeout_s_;
  Logger log_;
  int64_t joins_ = 0;  // the next join's number
  Assignment current_;
};

// Parses an assign value ("ok <epoch> <rank> <size> <hosts_version>" or
// "exit <message>"); `worker` and `n` only name it in errors.
Result<ElasticMember::Assignment> ParseAssignment(const std::string& value,
                                                  const std::string& worker, int64_t n);

}  // namespace hvd

// Bootstrap: config -> rendezvous -> topology -> transport. Run once per
// context, on the thread creating it, before the loop exists: it forms the
// job (the store, the host table, local and cross ranks), loads and
// connects the transport, and leaves the topology in the Config it was given.
// It keeps the store client the transport's key-value callbacks use, so it
// lives as long as the context (destroyed after the transport).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/config/config.h"
#include "core/observability/logging.h"
#include "transport/transport.h"
#include "rendezvous/store.h"

namespace hvd {

class Bootstrap {
 public:
  Bootstrap(Config* cfg, Logger* log) : cfg_(cfg), log_(log) { kv_.log = log; }
  ~Bootstrap();

  // Rendezvous (for more than one rank, where the transport needs a store),
  // topology, transport. Updates *cfg (topology, as the transport found it).
  Result<std::unique_ptr<Transport>> Run();
  // The device-only transport opened beside the host one (HVD_TRANSPORT
  // names one: the NCCL plugin), or null; after Run, once.
  std::unique_ptr<Transport> TakeDevice() { return std::move(device_); }
  // The store client (null: no store), thread-safe; lives as long as this.
  rdv::StoreClient* store() const { return client_.get(); }

  // The device-only transport again, over a process set's members (CUDA
  // tensors of the set), opened by every member in the same cycle:
  // members are context ranks in the set's order, this rank is
  // members[set_rank]; the device stays the one local_rank picks (the
  // context's), the keys are the set's own (prefix + "device/set<generation>/",
  // in *kv, which must outlive the transport). After Run, on the loop thread.
  struct DeviceSet {
    std::vector<int> members;
    int set_rank = 0;
    int cross_rank = 0, cross_size = 1;
    uint64_t generation = 0;
  };
  Result<std::unique_ptr<Transport>> OpenDeviceSet(const DeviceSet& set, const Transport& host,
                                                   PluginKv* kv);

 private:
  // Splits cfg_->transport into the host transport asked for
  // (host_request_) and a device-only one (device_name_).
  Status ResolveDeviceTransport();
  Status OpenDevice(const hvd_transport_env_t& host_env, const Transport& host);
  TransportOptions HostOptions(const std::string& transport) const;
  TransportOptions DeviceOptions(const Transport& host, const std::vector<int>& members) const;
  void SetTopology(hvd_transport_env_t* env) const;  // rank, size, local, cross from *cfg_
  std::string ChooseTransport() const;
  // Rendezvous: finds (or hosts) the store, then joins it.
  Status Rendezvous();
  Status StoreFromCallback(std::string* host, int* port, std::string* secret);
  Status StoreFromAddress(std::string* host, int* port, std::string* secret);
  std::string UnauthenticatedBind(const std::string& host, int port) const;
  Status JoinStore(const std::string& host, int port, const std::string& secret);
  // The host table; `flags` (HostFlags) rides in this rank's entry.
  Status LearnHosts(const std::string& flags);
  // The default across hosts (choice.cc).
  bool DefaultOpen(const std::string& transport) const;
  std::string HostFlags(const std::string& transport);
  std::string ChooseAcrossHosts(const std::string& transport) const;
  void OwnHostOnly();
  void ResolveLocalTopology();
  bool ParseMissingMark(const rdv::Bytes& value, std::vector<int>* missing) const;
  std::vector<int> MissingRanks(int r);
  Status NotJoined(const std::vector<int>& missing);

  Config* cfg_;
  Logger* log_;
  std::unique_ptr<rdv::StoreServer> server_;
  std::unique_ptr<rdv::StoreClient> client_;
  PluginKv kv_;
  std::string host_request_;  // the host transport asked for ("" = choose)
  std::string device_name_;   // a device-only transport beside it ("" = none)
  PluginKv device_kv_;        // its keys: kv_'s prefix + "device/"
  // The host transport's start environment (OpenDeviceSet starts from it),
  // and the strings it points at.
  hvd_transport_env_t host_env_{};
  std::string iface_, local_address_;
  std::vector<hvd_transport_option_t> options_;  // env.options: they point at the strings above
  // The host table by rank (env.hosts): every rank's host name and address
  // where the store round learnt them, else this rank's name alone.
  std::vector<std::string> hosts_, addresses_;
  std::vector<std::string> flags_;  // each rank's HostFlags, from the host table
  std::string no_ucx_;              // why this rank cannot load UCX ("" = it can, or not asked)
  std::unique_ptr<Transport> device_;
};

}  // namespace hvd

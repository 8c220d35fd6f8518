// Rendezvous: finding the job's store (hosting it where this rank is to)
// and joining it under this context's key prefix.
#include "core/bootstrap/bootstrap.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/netif.h"

namespace hvd {

Status Bootstrap::Rendezvous() {
  std::string host;
  int port = 0;
  std::string secret = cfg_->secret;
  if (cfg_->oob_allgather != nullptr) {
    HVD_CHECK(StoreFromCallback(&host, &port, &secret));
  } else if (!cfg_->rendezvous_addr.empty()) {
    HVD_CHECK(StoreFromAddress(&host, &port, &secret));
  } else {
    return Error(HVD_ERR_RENDEZVOUS,
                 "this is rank " + std::to_string(cfg_->rank) + " of " + std::to_string(cfg_->size) +
                     " (from " + cfg_->rank_source +
                     ") but there is no way to find the other ranks: launch with hvdrun, set "
                     "HVD_RENDEZVOUS_ADDR (and HVD_SECRET) or MASTER_ADDR/MASTER_PORT, pass "
                     "params.oob_allgather, or use the mpi transport under mpirun");
  }
  return JoinStore(host, port, secret);
}

// Rank 0 hosts a store; everyone learns where through the callback.
Status Bootstrap::StoreFromCallback(std::string* host, int* port, std::string* secret) {
  constexpr size_t kBlob = 256;
  struct Blob {
    char addr[64];
    char port[16];
    char secret[128];
  };
  static_assert(sizeof(Blob) <= kBlob, "blob");
  std::vector<uint8_t> send(kBlob, 0), recv(kBlob * static_cast<size_t>(cfg_->size), 0);
  if (cfg_->rank == 0) {
    if (secret->empty()) *secret = rdv::NewSecret();
    std::string addr = cfg_->local_size == cfg_->size ? std::string("127.0.0.1") : DefaultHostAddress();
    if (!cfg_->network_interface.empty()) {
      NetInterface nif;
      std::string why;
      if (!FindInterface(cfg_->network_interface, &nif, &why)) {
        return Error(HVD_ERR_RENDEZVOUS, "HVD_NETWORK_INTERFACE=" + cfg_->network_interface + ": " + why);
      }
      addr = nif.address;
    }
    HVD_ASSIGN_OR_RETURN(server_, rdv::StoreServer::Start("", 0, *secret));
    Blob b{};
    std::snprintf(b.addr, sizeof(b.addr), "%s", addr.c_str());
    std::snprintf(b.port, sizeof(b.port), "%d", server_->port());
    std::snprintf(b.secret, sizeof(b.secret), "%s", secret->c_str());
    std::memcpy(send.data(), &b, sizeof(b));
  }
  int rc = cfg_->oob_allgather(send.data(), recv.data(), kBlob, cfg_->oob_user);
  if (rc != 0) {
    return Error(HVD_ERR_RENDEZVOUS,
                 "the out-of-band allgather callback failed (returned " + std::to_string(rc) + ")");
  }
  Blob b{};
  std::memcpy(&b, recv.data(), sizeof(b));
  b.addr[sizeof(b.addr) - 1] = b.port[sizeof(b.port) - 1] = b.secret[sizeof(b.secret) - 1] = 0;
  *host = cfg_->rank == 0 ? "127.0.0.1" : b.addr;
  *port = std::atoi(b.port);
  *secret = b.secret;
  if (*port <= 0) {
    return Error(HVD_ERR_RENDEZVOUS,
                 "the out-of-band allgather did not deliver rank 0's store address (is the "
                 "callback copying rank r's bytes to offset r * bytes?)");
  }
  return Status::Ok();
}

// The store at HVD_RENDEZVOUS_ADDR (or MASTER_ADDR), which this rank hosts
// where the configuration says so.
Status Bootstrap::StoreFromAddress(std::string* host, int* port, std::string* secret) {
  HVD_CHECK(rdv::ParseHostPort(cfg_->rendezvous_addr, host, port)
                .Wrap("rendezvous address '" + cfg_->rendezvous_addr + "'"));
  const bool authenticated = !secret->empty();
  if (!authenticated) {
    // torchrun-style launches carry no secret (torchrun shares none a
    // secret could be derived from): every rank uses the same well-known
    // key, which checks integrity but does not authenticate.
    *secret = "6876642d6e6f2d736563726574";  // hex of "hvd-no-secret"
    if (!cfg_->host_store) {
      HVD_LOG(*log_, HVD_LOG_INFO,
              "no HVD_SECRET: the rendezvous store at " << cfg_->rendezvous_addr
                                                        << " is not authenticated");
    }
  }
  if (cfg_->host_store) {
    // With a secret the store may listen on every interface. Without one it
    // listens only on the rendezvous address (MASTER_ADDR), so that only
    // those who can reach that address can reach the store, and says so.
    const std::string bind_host = authenticated ? std::string() : UnauthenticatedBind(*host, *port);
    HVD_ASSIGN_OR_RETURN(server_, rdv::StoreServer::Start(bind_host, *port, *secret));
    *host = bind_host.empty() ? "127.0.0.1" : bind_host;
  }
  return Status::Ok();
}

// Where a store without a secret listens (empty: every interface), with
// the warning that says so.
std::string Bootstrap::UnauthenticatedBind(const std::string& host, int port) const {
  // A loopback address serves a job on this host only, or one whose
  // rendezvous address is itself loopback.
  const bool one_host = cfg_->local_size > 0 && cfg_->local_size == cfg_->size;
  const bool loopback_name = host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
  std::string why;
  std::string bind_host = rdv::OwnAddressOf(host, one_host || loopback_name, &why);
  if (bind_host == "0.0.0.0" || bind_host == "::") {
    why = "MASTER_ADDR is the wildcard address " + bind_host;
    bind_host.clear();
  }
  if (bind_host.empty()) {
    HVD_LOG(*log_, HVD_LOG_WARNING,
            "no HVD_SECRET: the rendezvous store this rank hosts is NOT authenticated and "
            "listens on EVERY interface, port "
                << port << " (" << why
                << "): anyone who can reach this host on that port can read and change "
                   "the job's rendezvous data. Set HVD_SECRET to the same 64 hex digits on "
                   "every rank (e.g. openssl rand -hex 32), or launch with hvdrun");
  } else {
    HVD_LOG(*log_, HVD_LOG_WARNING,
            "no HVD_SECRET: the rendezvous store this rank hosts is NOT authenticated; it "
            "listens only on "
                << (bind_host.find(':') != std::string::npos ? "[" + bind_host + "]" : bind_host)
                << ":" << port
                << " (MASTER_ADDR), and anyone who can reach that address can read and "
                   "change the job's rendezvous data. Set HVD_SECRET to the same 64 hex "
                   "digits on every rank (e.g. openssl rand -hex 32), or launch with hvdrun");
  }
  return bind_host;
}

// Connects to the store, takes this context's key prefix and tells a
// launcher this rank is up.
Status Bootstrap::JoinStore(const std::string& host, int port, const std::string& secret) {
  HVD_ASSIGN_OR_RETURN(client_,
                       rdv::StoreClient::Connect(host, port, secret, cfg_->start_timeout_s));

  // Keys of this communicator live under a prefix that differs for each
  // context a rank creates, so a second hvd_init in the same job never reads
  // the first one's keys.
  kv_.client = client_.get();
  if (!cfg_->kv_prefix.empty()) {
    kv_.prefix = cfg_->kv_prefix;  // an elastic epoch's
    if (cfg_->elastic) kv_.abort_key = "elastic/failed/" + std::to_string(cfg_->epoch);
  } else {
    HVD_ASSIGN_OR_RETURN(int64_t generation,
                         client_->Add("hvd/generation/" + std::to_string(cfg_->rank), 1));
    kv_.prefix = "hvd/" + std::to_string(generation) + "/";
  }
  // Tells a launcher this rank is up.
  HVD_CHECK(client_->Set("ready/" + std::to_string(cfg_->rank),
                         rdv::Bytes(cfg_->hostname.begin(), cfg_->hostname.end())));
  return Status::Ok();
}

}  // namespace hvd

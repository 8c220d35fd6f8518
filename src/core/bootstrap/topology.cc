// Topology: the host table (every rank's host name and address, through
// one store round), local and cross ranks from it where the launcher did
// not say, and the ranks that never join, named alike on every rank.
#include "core/bootstrap/bootstrap.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace hvd {

using Clock = std::chrono::steady_clock;

// ---- ranks that never join -------------------------------------------------
//
// Each rank publishes its host entry under host/<rank> and reads everyone
// else's. When the start timeout passes with ranks missing, the rank that
// hosts the store writes a mark in place of each missing rank's host name,
// listing them all, so every rank still waiting learns the same list at
// once; it then keeps the store up until those ranks have said they saw it
// (or briefly, at most kMissingLinger), since the store goes when it fails.

namespace {
const std::string kMissingMark("\0hvd-missing:", 13);  // no host name starts with NUL
constexpr auto kMissingLinger = std::chrono::seconds(2);

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}
}  // namespace

bool Bootstrap::ParseMissingMark(const rdv::Bytes& value, std::vector<int>* missing) const {
  if (value.size() < kMissingMark.size() ||
      !std::equal(kMissingMark.begin(), kMissingMark.end(), value.begin())) {
    return false;
  }
  std::string list(value.begin() + kMissingMark.size(), value.end());
  std::istringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    long r = std::strtol(item.c_str(), &end, 10);
    if (end != item.c_str() && r >= 0 && r < cfg_->size) missing->push_back(static_cast<int>(r));
  }
  return true;
}

// The ranks whose host name is not in the store, after waiting for rank r's
// timed out. If the store cannot say (it went away), rank r at least.
std::vector<int> Bootstrap::MissingRanks(int r) {
  std::vector<std::string> keys;
  for (int q = 0; q < cfg_->size; ++q) keys.push_back(kv_.prefix + "host/" + std::to_string(q));
  auto have = client_->Check(keys);
  std::vector<int> missing;
  if (!have.ok()) return {r};
  for (int q = 0; q < cfg_->size; ++q) {
    if (!(*have)[q]) missing.push_back(q);
  }
  return missing;
}

Status Bootstrap::NotJoined(const std::vector<int>& missing) {
  const std::string list = JoinRanks(missing);
  const std::string ack = kv_.prefix + "missing-seen";
  if (server_ != nullptr) {
    std::string mark = kMissingMark + list;
    rdv::Bytes value(mark.begin(), mark.end());
    bool published = true;
    for (int q : missing) {
      // Through the client: a Set returns once the Gets waiting for its key have their answer.
      published = client_->Set(kv_.prefix + "host/" + std::to_string(q), value).ok() && published;
    }
    const int others = cfg_->size - static_cast<int>(missing.size()) - 1;
    const auto until = Clock::now() + kMissingLinger;
    while (published && others > 0 && Clock::now() < until) {
      rdv::Bytes seen;
      if (server_->TryGet(ack, &seen) && seen.size() == 8) {
        int64_t n = 0;
        for (uint8_t b : seen) n = (n << 8) | b;
        if (n >= others) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } else {
    (void)client_->Add(ack, 1);  // best effort: lets the hosting rank close its store
  }
  std::ostringstream msg;
  msg << "ranks [" << list << "] did not join within " << cfg_->start_timeout_s
      << " s (start timeout; HVD_START_TIMEOUT)";
  return Error(HVD_ERR_TIMEOUT, msg.str());
}

namespace {
// A host entry in the store: the name, a NUL, the address, a NUL, the
// transports the rank can load (choice.cc; no host name holds a NUL, and
// the missing mark starts with one).
rdv::Bytes HostEntry(const std::string& name, const std::string& address, const std::string& flags) {
  rdv::Bytes v(name.begin(), name.end());
  v.push_back(0);
  v.insert(v.end(), address.begin(), address.end());
  v.push_back(0);
  v.insert(v.end(), flags.begin(), flags.end());
  return v;
}

void ParseHostEntry(const rdv::Bytes& v, std::string* name, std::string* address, std::string* flags) {
  const auto nul = std::find(v.begin(), v.end(), uint8_t{0});
  name->assign(v.begin(), nul);
  const auto from = nul == v.end() ? nul : nul + 1;
  const auto nul2 = std::find(from, v.end(), uint8_t{0});
  address->assign(from, nul2);
  flags->assign(nul2 == v.end() ? nul2 : nul2 + 1, v.end());
}
}  // namespace

// The host table through the store: this rank's entry (its host name and
// the address its store connection leaves from) under host/<rank>, every
// other rank's read back within the start timeout. Run on every start path
// with a store, whatever the launcher said about the topology.
Status Bootstrap::LearnHosts(const std::string& flags) {
  const std::string& me = cfg_->hostname;
  HVD_CHECK(client_->Set(kv_.prefix + "host/" + std::to_string(cfg_->rank),
                         HostEntry(me, client_->local_address(), flags)));
  const size_t n = static_cast<size_t>(cfg_->size);
  std::vector<std::string> hosts(n), addresses(n), all_flags(n);
  auto deadline = Clock::now() + std::chrono::duration<double>(cfg_->start_timeout_s);
  bool rechecked = false;
  for (int r = 0; r < cfg_->size; ++r) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    auto v = kv_.Get(kv_.prefix + "host/" + std::to_string(r), std::max(left, 0.001));
    std::vector<int> missing;
    if (v.ok()) {
      if (!ParseMissingMark(*v, &missing)) {
        ParseHostEntry(*v, &hosts[r], &addresses[r], &all_flags[r]);
        continue;
      }
    } else {
      if (v.status().code() != HVD_ERR_TIMEOUT) return v.status();
      missing = MissingRanks(r);
      if (missing.empty() && !rechecked) {
        rechecked = true;  // every rank is here after all: read the late one again
        --r;
        continue;
      }
    }
    return NotJoined(missing);
  }
  hosts_ = std::move(hosts);
  addresses_ = std::move(addresses);
  flags_ = std::move(all_flags);
  return Status::Ok();
}

// The host table where there is no store (a world of one; the MPI
// transport, which learns the others over its own communicator): this
// rank's host name, the others' unknown.
void Bootstrap::OwnHostOnly() {
  const size_t n = static_cast<size_t>(std::max(cfg_->size, 1));
  hosts_.assign(n, std::string());
  addresses_.assign(n, std::string());
  if (cfg_->rank >= 0 && static_cast<size_t>(cfg_->rank) < n) hosts_[cfg_->rank] = cfg_->hostname;
}

// Fills local/cross rank and size from the host table when the launcher
// did not say.
void Bootstrap::ResolveLocalTopology() {
  if (cfg_->local_rank >= 0 && cfg_->cross_rank >= 0) return;
  const std::string& me = cfg_->hostname;
  const std::vector<std::string>& hosts = hosts_;
  int local_rank = 0, local_size = 0;
  for (int r = 0; r < cfg_->size; ++r) {
    if (hosts[r] == me) {
      if (r < cfg_->rank) ++local_rank;
      ++local_size;
    }
  }
  // Cross communicator: one rank per host with the same local rank.
  std::vector<std::string> seen;
  std::unordered_map<std::string, int> counter;
  int cross_rank = -1;
  for (int r = 0; r < cfg_->size; ++r) {
    int lr = counter[hosts[r]]++;
    if (lr != local_rank) continue;
    if (r == cfg_->rank) cross_rank = static_cast<int>(seen.size());
    seen.push_back(hosts[r]);
  }
  if (cfg_->local_rank < 0) {
    cfg_->local_rank = local_rank;
    cfg_->local_size = local_size;
  }
  if (cfg_->cross_rank < 0) {
    cfg_->cross_rank = cross_rank;
    cfg_->cross_size = static_cast<int>(seen.size());
  }
}

}  // namespace hvd

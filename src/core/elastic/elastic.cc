#include "core/elastic/elastic.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace hvd {

namespace {

std::string Text(const rdv::Bytes& b) { return std::string(b.begin(), b.end()); }

bool ParseI64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

Result<ElasticMember::Assignment> ParseAssignment(const std::string& value,
                                                  const std::string& worker, int64_t n) {
  if (value.rfind("exit", 0) == 0) {
    std::string why = value.size() > 5 ? value.substr(5) : "the launcher ended this worker's part";
    return Error(HVD_ERR_MEMBERSHIP_CHANGED, "the launcher ends this worker (" + worker + "): " + why);
  }
  std::istringstream in(value);
  std::string tag, e, r, s, hv, extra;
  in >> tag >> e >> r >> s >> hv;
  ElasticMember::Assignment a;
  int64_t rank = -1, size = 0;
  const bool ok = tag == "ok" && ParseI64(e, &a.epoch) && ParseI64(r, &rank) && ParseI64(s, &size) &&
                  ParseI64(hv, &a.hosts_version) && !(in >> extra) && a.epoch >= 0 && size >= 1 &&
                  size <= (1 << 24) && rank >= 0 && rank < size;
  if (!ok) {
    return Error(HVD_ERR_RENDEZVOUS, "the launcher's answer to join " + std::to_string(n) +
                                         " of worker " + worker + " is malformed: '" + value + "'");
  }
  a.rank = static_cast<int>(rank);
  a.size = static_cast<int>(size);
  return a;
}

Result<std::unique_ptr<ElasticMember>> ElasticMember::Connect(const Config& cfg) {
  std::string host;
  int port = 0;
  HVD_CHECK(rdv::ParseHostPort(cfg.rendezvous_addr, &host, &port)
                .Wrap("rendezvous address '" + cfg.rendezvous_addr + "'"));
  if (cfg.secret.empty()) {
    return InvalidArgument("an elastic worker needs HVD_SECRET (hvdrun sets it)");
  }
  HVD_ASSIGN_OR_RETURN(std::unique_ptr<rdv::StoreClient> client,
                       rdv::StoreClient::Connect(host, port, cfg.secret, cfg.start_timeout_s));
  return std::unique_ptr<ElasticMember>(new ElasticMember(std::move(client), cfg));
}

Result<ElasticMember::Assignment> ElasticMember::Join() {
  const int64_t n = joins_++;
  const std::string suffix = worker_ + "/" + std::to_string(n);
  HVD_CHECK(client_->Set("elastic/join/" + suffix, rdv::Bytes(hostname_.begin(), hostname_.end()))
                .Wrap("worker " + worker_ + " asking to join an epoch"));
  HVD_LOG(log_, HVD_LOG_DEBUG, "elastic worker " << worker_ << ": join " << n << " sent");
  auto v = client_->Get("elastic/assign/" + suffix, timeout_s_);
  if (!v.ok()) {
    if (v.status().code() == HVD_ERR_TIMEOUT) {
      std::ostringstream os;
      os << "worker " << worker_ << " waited " << timeout_s_
         << " s (elastic timeout; HVD_ELASTIC_TIMEOUT) for the launcher to form the next epoch";
      return Error(HVD_ERR_TIMEOUT, os.str());
    }
    return v.status().Wrap("worker " + worker_ + " waiting for the launcher's answer");
  }
  HVD_ASSIGN_OR_RETURN(Assignment a, ParseAssignment(Text(*v), worker_, n));
  current_ = a;
  HVD_LOG(log_, HVD_LOG_DEBUG,
          "elastic worker " << worker_ << ": epoch " << a.epoch << ", rank " << a.rank << " of "
                            << a.size);
  return a;
}

Result<bool> ElasticMember::HostsUpdated() {
  auto have = client_->Check({"elastic/hosts_version"});
  if (!have.ok()) return have.status();
  if (!(*have)[0]) return false;
  HVD_ASSIGN_OR_RETURN(rdv::Bytes v, client_->Get("elastic/hosts_version", 1.0));
  int64_t version = 0;
  if (!ParseI64(Text(v), &version)) {
    return Error(HVD_ERR_RENDEZVOUS, "elastic/hosts_version is malformed: '" + Text(v) + "'");
  }
  return version > current_.hosts_version;
}

}  // namespace hvd

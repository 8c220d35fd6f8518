#include "launcher/hosts.h"

#include "common/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace hvd::launcher {
namespace {

using hvd::IsVirtualBridge;

bool ParseSlots(const std::string& s, int* out) {
  if (s.empty() || s.size() > 6) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v <= 0) return false;
  *out = v;
  return true;
}

bool ValidHostName(const std::string& h) {
  if (h.empty() || h.size() > 255) return false;
  for (char c : h) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_' || c == ':' || c == '@' || c == '%';
    if (!ok) return false;
  }
  return h[0] != '-';  // never let a host name pass as an ssh option
}

// "host", "host:N", "[v6]" or "[v6]:N".
Status ParseHostToken(const std::string& tok, HostSlots* out, bool* slots_given = nullptr) {
  std::string host = tok;
  std::string slots;
  if (!tok.empty() && tok[0] == '[') {
    size_t close = tok.find(']');
    if (close == std::string::npos) return InvalidArgument("bad host '" + tok + "': missing ']'");
    host = tok.substr(1, close - 1);
    std::string rest = tok.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return InvalidArgument("bad host '" + tok + "'");
      slots = rest.substr(1);
      if (slots.empty()) return InvalidArgument("bad host '" + tok + "': empty slot count");
    }
  } else {
    size_t colon = tok.rfind(':');
    // One colon: host:slots. Several: a bare IPv6 literal (no slots).
    if (colon != std::string::npos && tok.find(':') == colon) {
      host = tok.substr(0, colon);
      slots = tok.substr(colon + 1);
      if (slots.empty()) return InvalidArgument("bad host '" + tok + "': empty slot count");
    }
  }
  if (!ValidHostName(host)) return InvalidArgument("bad host name '" + host + "'");
  out->host = host;
  out->slots = 1;
  if (!slots.empty() && !ParseSlots(slots, &out->slots)) {
    return InvalidArgument("bad slot count '" + slots + "' for host " + host);
  }
  if (slots_given != nullptr) *slots_given = !slots.empty();
  return Status::Ok();
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string AddrToString(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

struct IfAddr {
  std::string name;
  std::string addr;
  int family = 0;
  unsigned flags = 0;
  bool link_local = false;
};

std::vector<IfAddr> ListInterfaces() {
  std::vector<IfAddr> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr) continue;
    int fam = p->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    IfAddr a;
    a.name = p->ifa_name;
    a.addr = AddrToString(p->ifa_addr);
    a.family = fam;
    a.flags = p->ifa_flags;
    if (fam == AF_INET6) {
      const auto* s6 = reinterpret_cast<const sockaddr_in6*>(p->ifa_addr);
      a.link_local = IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr);
    }
    out.push_back(a);
  }
  freeifaddrs(list);
  return out;
}

bool IsLoopbackAddress(const std::string& addr) {
  in_addr a4;
  if (inet_pton(AF_INET, addr.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6;
  if (inet_pton(AF_INET6, addr.c_str(), &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&a6)) return a6.s6_addr[12] == 127;
  }
  return false;
}

}  // namespace

namespace {
// The next line of a host file or a discovery script's output that says
// something: '#' starts a comment, blanks around are dropped, empty lines
// skipped. *lineno counts every line read.
bool NextListLine(std::istream& in, std::string* line, int* lineno) {
  while (std::getline(in, *line)) {
    ++*lineno;
    size_t hash = line->find('#');
    if (hash != std::string::npos) line->resize(hash);
    *line = Trim(*line);
    if (!line->empty()) return true;
  }
  return false;
}
}  // namespace

Result<std::vector<HostSlots>> ParseHostList(const std::string& spec) {
  std::vector<HostSlots> hosts;
  std::stringstream ss(spec);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    tok = Trim(tok);
    if (tok.empty()) return Status(InvalidArgument("empty entry in host list '" + spec + "'"));
    HostSlots h;
    HVD_CHECK(ParseHostToken(tok, &h));
    hosts.push_back(h);
  }
  if (hosts.empty()) return Status(InvalidArgument("empty host list"));
  return hosts;
}

std::string HostfileFromEnvironment(std::string* variable) {
  for (const char* name : {"OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile",
                           "I_MPI_HYDRA_HOST_FILE", "HYDRA_HOST_FILE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') {
      if (variable != nullptr) *variable = name;
      return v;
    }
  }
  return "";
}

std::string DiscoveryScriptBeside(const std::string& hostfile) {
  if (hostfile.empty()) return "";
  const size_t slash = hostfile.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : hostfile.substr(0, slash);
  const std::string script = (dir.empty() ? "" : dir) + "/discover_hosts.sh";
  return ::access(script.c_str(), X_OK) == 0 ? script : "";
}

Result<std::vector<HostSlots>> ParseHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return Status(InvalidArgument("cannot read hostfile '" + path + "': " + std::strerror(errno)));
  }
  std::vector<HostSlots> hosts;
  std::string line;
  int lineno = 0;
  while (NextListLine(in, &line, &lineno)) {
    std::stringstream ls(line);
    std::string first, word;
    ls >> first;
    HostSlots h;
    Status st = ParseHostToken(first, &h);
    while (st.ok() && ls >> word) {
      if (word.rfind("slots=", 0) == 0) {
        if (!ParseSlots(word.substr(6), &h.slots)) st = InvalidArgument("bad " + word);
      } else if (word.rfind("max_slots=", 0) != 0) {  // accepted and ignored
        st = InvalidArgument("unknown field '" + word + "'");
      }
    }
    if (!st.ok()) {
      return Status(st.Wrap("hostfile " + path + " line " + std::to_string(lineno)));
    }
    hosts.push_back(h);
  }
  if (hosts.empty()) return Status(InvalidArgument("hostfile '" + path + "' lists no host"));
  return hosts;
}

Result<std::vector<HostSlots>> ParseDiscoveredHosts(const std::string& text, int default_slots) {
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::stringstream in(text);
  std::string line;
  int lineno = 0;
  while (NextListLine(in, &line, &lineno)) {
    auto where = [&] { return "line " + std::to_string(lineno) + " '" + line + "'"; };
    if (line.find_first_of(" \t") != std::string::npos) {
      return Status(InvalidArgument(where() + ": one host:slots a line expected"));
    }
    HostSlots h;
    bool slots_given = false;
    Status st = ParseHostToken(line, &h, &slots_given);
    if (!st.ok()) return Status(st.Wrap(where()));
    if (!slots_given) h.slots = default_slots;
    if (!seen.insert(h.host).second) {
      return Status(InvalidArgument(where() + ": host " + h.host + " is listed twice"));
    }
    hosts.push_back(h);
  }
  return hosts;
}

Result<Plan> BuildPlan(const std::vector<HostSlots>& hosts, int np) {
  long total = 0;
  for (const auto& h : hosts) total += h.slots;
  if (np <= 0) return Status(InvalidArgument("-np must be positive"));
  if (np > total) {
    return Status(InvalidArgument("-np " + std::to_string(np) + " is larger than the " +
                                  std::to_string(total) + " slots of the host list"));
  }
  Plan plan;
  plan.size = np;
  int rank = 0;
  for (const auto& h : hosts) {
    if (rank >= np) break;
    int here = std::min(h.slots, np - rank);
    int host_index = static_cast<int>(plan.hosts.size());
    plan.hosts.push_back({h.host, here});
    for (int l = 0; l < here; ++l) {
      RankSlot r;
      r.rank = rank++;
      r.host_index = host_index;
      r.local_rank = l;
      r.local_size = here;
      plan.ranks.push_back(r);
    }
  }
  // Cross ranks: for local rank l, the hosts holding an l-th rank, in order.
  std::map<int, int> count_per_local;
  for (auto& r : plan.ranks) r.cross_rank = count_per_local[r.local_rank]++;
  for (auto& r : plan.ranks) r.cross_size = count_per_local[r.local_rank];
  return plan;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "localhost.localdomain" || IsLoopbackAddress(host);
}

bool IsLocalHost(const std::string& host) {
  static std::map<std::string, bool> cache;
  auto it = cache.find(host);
  if (it != cache.end()) return it->second;

  bool local = IsLoopbackHost(host);
  std::set<std::string> mine;
  if (!local) {
    char name[256] = {0};
    if (gethostname(name, sizeof(name) - 1) == 0) {
      std::string full = name;
      std::string shortname = full.substr(0, full.find('.'));
      local = host == full || host == shortname;
    }
  }
  if (!local) {
    for (const auto& a : ListInterfaces()) mine.insert(a.addr);
    local = mine.count(host) > 0;
  }
  if (!local) {
    addrinfo hints;
    std::memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0) {
      for (addrinfo* p = res; p != nullptr && !local; p = p->ai_next) {
        std::string a = AddrToString(p->ai_addr);
        local = IsLoopbackAddress(a) || mine.count(a) > 0;
      }
      freeaddrinfo(res);
    }
  }
  cache[host] = local;
  return local;
}

Result<std::string> InterfaceAddress(const std::string& ifname) {
  uint32_t net = 0;
  int bits = 0;
  if (ParseCidr(ifname, &net, &bits)) {
    hvd::NetInterface nif;
    std::string why;
    if (!FindInterface(ifname, &nif, &why)) return Status(InvalidArgument(why));
    return nif.address;
  }
  auto all = ListInterfaces();
  bool seen = false;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& a : all) {
      if (a.name != ifname) continue;
      seen = true;
      if (pass == 0 && a.family == AF_INET) return a.addr;
      if (pass == 1 && a.family == AF_INET6 && !a.link_local) return a.addr;
    }
  }
  if (!seen) {
    std::string names;
    std::set<std::string> uniq;
    for (const auto& a : all) {
      if (uniq.insert(a.name).second) names += (names.empty() ? "" : ", ") + a.name;
    }
    return Status(InvalidArgument("network interface '" + ifname + "' not found (this host has: " +
                                  names + ")"));
  }
  return Status(InvalidArgument("network interface '" + ifname + "' has no usable address"));
}

Result<std::string> DefaultAddress(std::string* ifname) {
  auto all = ListInterfaces();
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& a : all) {
      // IsVirtualBridge: the same rule the library uses for its default.
      if (!(a.flags & IFF_UP) || (a.flags & IFF_LOOPBACK) || IsVirtualBridge(a.name)) continue;
      bool pick = pass == 0 ? a.family == AF_INET : (a.family == AF_INET6 && !a.link_local);
      if (pick) {
        *ifname = a.name;
        return a.addr;
      }
    }
  }
  return Status(Error(HVD_ERR_RENDEZVOUS,
                      "no network interface that other hosts could reach (up, not loopback, not a "
                      "bridge); name one with --network-interface"));
}

Result<Reach> ReachHosts(const std::vector<std::string>& remote_hosts) {
  Reach r;
  std::vector<std::string> addrs;
  for (const std::string& h : remote_hosts) {
    hvd::NetInterface nif;
    std::string remote, why;
    if (!RouteTowards(h, &nif, &remote, &why)) return Status(Error(HVD_ERR_RENDEZVOUS, why));
    if (r.ifname.empty()) {
      r.ifname = nif.name;
      r.address = nif.address;
      r.cidr = CidrOf(nif);
    } else if (nif.name != r.ifname) {
      return Status(Error(HVD_ERR_RENDEZVOUS, "hosts are reached through different interfaces (" +
                                                  remote_hosts[0] + ": " + r.ifname + ", " + h +
                                                  ": " + nif.name + ")"));
    }
    if (nif.loopback) {
      return Status(Error(HVD_ERR_RENDEZVOUS, h + " (" + remote + ") is reached through loopback"));
    }
    r.summary += (r.summary.empty() ? "" : ", ") + h + " (" + remote + ")";
    addrs.push_back(remote);
  }
  if (r.ifname.empty()) return Status(Error(HVD_ERR_RENDEZVOUS, "no remote hosts"));
  const std::string net = r.cidr;
  for (const std::string& a : addrs) {
    if (!InCidr(a, net)) r.cidr.clear();  // routed beyond this network: no common setting
  }
  r.summary += " through " + r.ifname + " (" + r.address + ", " + net + ")";
  return r;
}

std::string JoinHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

}  // namespace hvd::launcher

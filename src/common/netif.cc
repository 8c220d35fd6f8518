#include "common/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

namespace hvd {

std::vector<NetInterface> ListInterfaces() {
  std::vector<NetInterface> out;
  struct ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (struct ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr || p->ifa_addr->sa_family != AF_INET) continue;
    if ((p->ifa_flags & IFF_UP) == 0) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    auto* sin = reinterpret_cast<struct sockaddr_in*>(p->ifa_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) == nullptr) continue;
    NetInterface nif;
    nif.name = p->ifa_name;
    nif.address = buf;
    nif.loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
    if (p->ifa_netmask != nullptr && p->ifa_netmask->sa_family == AF_INET) {
      const uint32_t m = ntohl(reinterpret_cast<struct sockaddr_in*>(p->ifa_netmask)->sin_addr.s_addr);
      nif.prefix = __builtin_popcount(m);
    }
    out.push_back(nif);
  }
  freeifaddrs(list);
  return out;
}

bool IsVirtualBridge(const std::string& name) {
  // Container and VM bridges: every host may have the same address on them,
  // so a peer dialling it reaches its own bridge.
  static const char* kPrefixes[] = {"docker", "podman", "br-",    "virbr",  "veth",  "cni",
                                    "flannel", "lxcbr", "lxdbr", "vboxnet", "vmnet", "cali",
                                    "weave",   "kube-"};
  for (const char* p : kPrefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

std::string InterfaceAddress(const std::string& name) {
  for (const NetInterface& nif : ListInterfaces()) {
    if (nif.name == name) return nif.address;
  }
  return "";
}

std::string DefaultHostAddress() {
  for (const NetInterface& nif : ListInterfaces()) {
    if (!nif.loopback && !IsVirtualBridge(nif.name)) return nif.address;
  }
  return "127.0.0.1";
}

namespace {

bool ParseIpv4(const std::string& s, uint32_t* out) {
  struct in_addr a;
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

uint32_t Mask(int bits) { return bits <= 0 ? 0 : bits >= 32 ? 0xFFFFFFFFu : ~((1u << (32 - bits)) - 1); }

std::string Ipv4String(uint32_t host_order) {
  struct in_addr a;
  a.s_addr = htonl(host_order);
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

std::string Describe(const std::vector<NetInterface>& all) {
  std::string s;
  for (const NetInterface& nif : all) s += (s.empty() ? "" : ", ") + nif.name + " " + CidrOf(nif);
  return s.empty() ? "none with an IPv4 address" : s;
}

}  // namespace

bool ParseCidr(const std::string& s, uint32_t* net, int* bits) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos || slash + 1 >= s.size() || slash + 3 < s.size()) return false;
  int b = 0;
  for (size_t i = slash + 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    b = b * 10 + (s[i] - '0');
  }
  uint32_t a = 0;
  if (b > 32 || !ParseIpv4(s.substr(0, slash), &a)) return false;
  *net = a & Mask(b);
  *bits = b;
  return true;
}

bool InCidr(const std::string& address, const std::string& cidr) {
  uint32_t net = 0, a = 0;
  int bits = 0;
  return ParseCidr(cidr, &net, &bits) && ParseIpv4(address, &a) && (a & Mask(bits)) == net;
}

std::string CidrOf(const NetInterface& nif) {
  uint32_t a = 0;
  if (!ParseIpv4(nif.address, &a)) return nif.address;
  return Ipv4String(a & Mask(nif.prefix)) + "/" + std::to_string(nif.prefix);
}

bool FindInterface(const std::string& spec, NetInterface* out, std::string* why) {
  const std::vector<NetInterface> all = ListInterfaces();
  uint32_t net = 0;
  int bits = 0;
  const bool cidr = ParseCidr(spec, &net, &bits);
  for (const NetInterface& nif : all) {
    if (cidr ? InCidr(nif.address, spec) : nif.name == spec) {
      *out = nif;
      return true;
    }
  }
  *why = (cidr ? "no interface of this host has an IPv4 address in " + spec
               : "no interface '" + spec + "' with an IPv4 address on this host") +
         " (it has: " + Describe(all) + ")";
  return false;
}

bool RouteTowards(const std::string& host, NetInterface* out, std::string* remote, std::string* why) {
  struct addrinfo hints = {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  struct addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), "9", &hints, &res);
  if (rc != 0 || res == nullptr) {
    *why = "cannot resolve '" + host + "' to an IPv4 address: " + gai_strerror(rc);
    return false;
  }
  char buf[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &reinterpret_cast<struct sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof(buf));
  *remote = buf;
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  bool ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  freeaddrinfo(res);
  struct sockaddr_in local = {};
  socklen_t len = sizeof(local);
  ok = ok && getsockname(fd, reinterpret_cast<struct sockaddr*>(&local), &len) == 0;
  if (fd >= 0) close(fd);
  if (!ok) {
    *why = "no route from this host to " + host + " (" + *remote + ")";
    return false;
  }
  char mine[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &local.sin_addr, mine, sizeof(mine));
  for (const NetInterface& nif : ListInterfaces()) {
    if (nif.address == mine) {
      *out = nif;
      return true;
    }
  }
  *why = "the route to " + host + " leaves from " + mine + ", which no interface here holds";
  return false;
}

}  // namespace hvd

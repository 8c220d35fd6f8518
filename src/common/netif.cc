#include "common/netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

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

}  // namespace hvd

// Network interface helpers shared by the core and the launcher.
#pragma once

#include <string>
#include <vector>

namespace hvd {

struct NetInterface {
  std::string name;
  std::string address;  // numeric IPv4
  bool loopback = false;
};

// Interfaces that are up and have an IPv4 address, in kernel order.
std::vector<NetInterface> ListInterfaces();

// Container/VM bridges and veth pairs, never chosen by default.
bool IsVirtualBridge(const std::string& name);

// The IPv4 address of interface `name`, or "" if it has none.
std::string InterfaceAddress(const std::string& name);

// The address other hosts most likely reach this host on: the first
// non-loopback, non-bridge interface that is up; "127.0.0.1" if none.
std::string DefaultHostAddress();

}  // namespace hvd

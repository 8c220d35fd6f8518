// Network interface helpers shared by the core and the launcher.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hvd {

struct NetInterface {
  std::string name;
  std::string address;  // numeric IPv4
  bool loopback = false;
  int prefix = 32;      // netmask length
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

// An IPv4 network in CIDR notation ("10.0.0.0/24"; host bits may be set:
// "10.0.0.7/24" is the same network). False if `s` is not one.
bool ParseCidr(const std::string& s, uint32_t* net, int* bits);
// Whether numeric IPv4 `address` lies in CIDR `cidr`.
bool InCidr(const std::string& address, const std::string& cidr);
// "10.147.0.0/24": the network of an interface's address.
std::string CidrOf(const NetInterface& nif);

// The interface an interface setting names: an interface name ("eth0"),
// or a CIDR ("10.147.0.0/24": the first interface that is up with an
// IPv4 address in it). False with *why naming this host's interfaces and
// their networks where none matches.
bool FindInterface(const std::string& spec, NetInterface* out, std::string* why);

// The interface, and its IPv4 address, the kernel's routes use towards
// `host` (a name or numeric address): a UDP socket connected to it (no
// packet leaves). *remote gets the address `host` resolved to. False with
// *why where `host` does not resolve or no route leads there. This is
// reachability, where a name list can only guess: a host reached through
// a bridge is reached through that bridge.
bool RouteTowards(const std::string& host, NetInterface* out, std::string* remote, std::string* why);

}  // namespace hvd

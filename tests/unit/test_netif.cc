// The interface rules shared by the core and the launcher (common/netif.h):
// CIDR settings and the choice by route.
#include <gtest/gtest.h>

#include <string>

#include "common/netif.h"

namespace hvd {
namespace {

TEST(Cidr, Parses) {
  uint32_t net = 0;
  int bits = 0;
  ASSERT_TRUE(ParseCidr("10.147.0.0/24", &net, &bits));
  EXPECT_EQ(net, 0x0A930000u);
  EXPECT_EQ(bits, 24);
  ASSERT_TRUE(ParseCidr("10.147.0.77/24", &net, &bits));  // host bits dropped
  EXPECT_EQ(net, 0x0A930000u);
  ASSERT_TRUE(ParseCidr("0.0.0.0/0", &net, &bits));
  EXPECT_EQ(net, 0u);
  EXPECT_EQ(bits, 0);
  ASSERT_TRUE(ParseCidr("192.0.2.1/32", &net, &bits));
  EXPECT_EQ(net, 0xC0000201u);
  for (const char* bad : {"eth0", "10.0.0.0", "10.0.0.0/", "10.0.0.0/33", "10.0.0/24", "10.0.0.0/2x",
                          "10.0.0.0/024", "/24", "fe80::/64", "10.0.0.256/8"}) {
    EXPECT_FALSE(ParseCidr(bad, &net, &bits)) << bad;
  }
}

TEST(Cidr, Contains) {
  EXPECT_TRUE(InCidr("10.147.0.12", "10.147.0.0/24"));
  EXPECT_FALSE(InCidr("10.147.1.12", "10.147.0.0/24"));
  EXPECT_TRUE(InCidr("10.147.1.12", "10.147.0.0/16"));
  EXPECT_TRUE(InCidr("8.8.8.8", "0.0.0.0/0"));
  EXPECT_FALSE(InCidr("10.147.0.12", "eth0"));
  EXPECT_FALSE(InCidr("not an address", "10.0.0.0/8"));
}

TEST(Cidr, OfAnInterface) {
  NetInterface nif;
  nif.address = "172.30.0.1";
  nif.prefix = 16;
  EXPECT_EQ(CidrOf(nif), "172.30.0.0/16");
  nif.prefix = 32;
  EXPECT_EQ(CidrOf(nif), "172.30.0.1/32");
}

// Loopback is on every machine: found by name and by CIDR; an absent
// network is an error naming this host's interfaces.
TEST(FindInterface, ByNameAndByCidr) {
  NetInterface nif;
  std::string why;
  ASSERT_TRUE(FindInterface("lo", &nif, &why)) << why;
  EXPECT_EQ(nif.address, "127.0.0.1");
  EXPECT_EQ(nif.prefix, 8);
  NetInterface by_cidr;
  ASSERT_TRUE(FindInterface("127.0.0.0/8", &by_cidr, &why)) << why;
  EXPECT_EQ(by_cidr.name, "lo");
  // A documentation network this machine has no address in.
  std::string absent;
  for (const char* net : {"198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/24"}) {
    bool used = false;
    for (const NetInterface& i : ListInterfaces()) used = used || InCidr(i.address, net);
    if (!used) {
      absent = net;
      break;
    }
  }
  ASSERT_FALSE(absent.empty()) << "this machine has addresses in every documentation network";
  EXPECT_FALSE(FindInterface(absent, &nif, &why));
  EXPECT_NE(why.find("no interface of this host has an IPv4 address in " + absent), std::string::npos) << why;
  EXPECT_NE(why.find("lo 127.0.0.0/8"), std::string::npos) << why;
  EXPECT_FALSE(FindInterface("no-such-if0", &nif, &why));
  EXPECT_NE(why.find("no-such-if0"), std::string::npos) << why;
}

TEST(RouteTowards, LoopbackAndUnresolvable) {
  NetInterface nif;
  std::string remote, why;
  ASSERT_TRUE(RouteTowards("127.0.0.1", &nif, &remote, &why)) << why;
  EXPECT_EQ(nif.name, "lo");
  EXPECT_EQ(remote, "127.0.0.1");
  ASSERT_TRUE(RouteTowards("localhost", &nif, &remote, &why)) << why;
  EXPECT_TRUE(nif.loopback);
  EXPECT_FALSE(RouteTowards("no-such-host.invalid", &nif, &remote, &why));
  EXPECT_NE(why.find("cannot resolve 'no-such-host.invalid'"), std::string::npos) << why;
}

}  // namespace
}  // namespace hvd

// The mpirun command line of hvdrun --transport mpi (BuildMpirunCommand),
// for what depends on the network: the interface settings for Open MPI's TCP
// paths and UCX_NET_DEVICES for its UCX pml. The whole command line is
// checked word by word, against a stand-in mpirun, by
// tests/integration/mpi/test_hvdrun_args.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "launcher/mpi_delegate.h"

namespace hvd::launcher {
namespace {

Options TwoHosts() {
  Options o;
  o.np = 4;
  o.hosts = {{"h1", 2}, {"h2", 2}};
  o.hosts_given = true;
  o.transport = "mpi";
  o.command = {"prog"};
  return o;
}

// The value given to `-x NAME` ("NAME" alone when passed by name), or
// "<absent>".
std::string Exported(const MpirunCommand& cmd, const std::string& name) {
  const auto& a = cmd.argv;
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    if (a[i] != "-x") continue;
    if (a[i + 1] == name) return name;
    if (a[i + 1].compare(0, name.size() + 1, name + "=") == 0) return a[i + 1].substr(name.size() + 1);
  }
  return "<absent>";
}

// The value of `--mca PARAM`, or "<absent>".
std::string Mca(const MpirunCommand& cmd, const std::string& param) {
  const auto& a = cmd.argv;
  for (size_t i = 0; i + 2 < a.size(); ++i) {
    if (a[i] == "--mca" && a[i + 1] == param) return a[i + 2];
  }
  return "<absent>";
}

TEST(LauncherMpirun, InterfaceNameReachesTcpAndUcx) {
  Options o = TwoHosts();
  o.network_interface = "eth0";
  const MpirunCommand cmd = BuildMpirunCommand(o, MpirunHost());
  ASSERT_TRUE(cmd.error.empty()) << cmd.error;
  EXPECT_EQ(Mca(cmd, "btl_tcp_if_include"), "eth0");
  EXPECT_EQ(Mca(cmd, "oob_tcp_if_include"), "eth0");
  EXPECT_EQ(Exported(cmd, "HVD_NETWORK_INTERFACE"), "eth0");
  EXPECT_EQ(Exported(cmd, "UCX_NET_DEVICES"), "eth0");
  EXPECT_NE(cmd.ucx_note.find("UCX_NET_DEVICES=eth0"), std::string::npos) << cmd.ucx_note;
  // Exported before the command, which ends the line.
  EXPECT_EQ(cmd.argv.back(), "prog");
}

TEST(LauncherMpirun, UsersUcxNetDevicesWins) {
  Options o = TwoHosts();
  o.network_interface = "eth0";
  MpirunHost host;
  host.environment = {"PATH=/bin", "UCX_NET_DEVICES=mlx5_0:1,eth0"};
  MpirunCommand cmd = BuildMpirunCommand(o, host);
  // From the environment: passed by name, so mpirun gives every rank its value.
  EXPECT_EQ(Exported(cmd, "UCX_NET_DEVICES"), "UCX_NET_DEVICES");
  EXPECT_NE(cmd.ucx_note.find("environment"), std::string::npos) << cmd.ucx_note;
  // From -x: as given, once.
  o.extra_env = {{"UCX_NET_DEVICES", "ib0"}};
  cmd = BuildMpirunCommand(o, host);
  EXPECT_EQ(Exported(cmd, "UCX_NET_DEVICES"), "ib0");
  EXPECT_EQ(std::count(cmd.argv.begin(), cmd.argv.end(), "UCX_NET_DEVICES"), 0);
  EXPECT_NE(cmd.ucx_note.find("-x"), std::string::npos) << cmd.ucx_note;
}

TEST(LauncherMpirun, NetworkKnownOnlyAsCidrLeavesUcxAlone) {
  // The routed network (ReachHosts): Open MPI matches a CIDR on every host,
  // UCX would need each host's own name for the interface.
  Options o = TwoHosts();
  o.mpi_network = "10.147.0.0/24";
  MpirunCommand cmd = BuildMpirunCommand(o, MpirunHost());
  EXPECT_EQ(Mca(cmd, "btl_tcp_if_include"), "10.147.0.0/24");
  EXPECT_EQ(Mca(cmd, "oob_tcp_if_include"), "10.147.0.0/24");
  EXPECT_EQ(Exported(cmd, "UCX_NET_DEVICES"), "<absent>");
  EXPECT_NE(cmd.ucx_note.find("known only as 10.147.0.0/24"), std::string::npos) << cmd.ucx_note;
  // A CIDR given with --network-interface: the same.
  o.mpi_network.clear();
  o.network_interface = "10.147.0.0/24";
  cmd = BuildMpirunCommand(o, MpirunHost());
  EXPECT_EQ(Exported(cmd, "HVD_NETWORK_INTERFACE"), "10.147.0.0/24");
  EXPECT_EQ(Exported(cmd, "UCX_NET_DEVICES"), "<absent>");
  EXPECT_NE(cmd.ucx_note.find("known only as"), std::string::npos) << cmd.ucx_note;
}

TEST(LauncherMpirun, RdmaDevicesLeaveUcxToTheUser) {
  Options o = TwoHosts();
  o.network_interface = "eth0";
  MpirunHost host;
  host.rdma_devices = {"mlx5_0", "mlx5_1"};
  const MpirunCommand cmd = BuildMpirunCommand(o, host);
  EXPECT_EQ(Mca(cmd, "btl_tcp_if_include"), "eth0");
  EXPECT_EQ(Exported(cmd, "UCX_NET_DEVICES"), "<absent>");
  EXPECT_NE(cmd.ucx_note.find("RDMA devices (mlx5_0, mlx5_1)"), std::string::npos) << cmd.ucx_note;
}

TEST(LauncherMpirun, NoInterfaceNoNetworkSettings) {
  Options o;
  o.np = 2;
  o.command = {"prog"};
  const MpirunCommand cmd = BuildMpirunCommand(o, MpirunHost());
  EXPECT_EQ(Mca(cmd, "btl_tcp_if_include"), "<absent>");
  EXPECT_EQ(Exported(cmd, "UCX_NET_DEVICES"), "<absent>");
  EXPECT_EQ(Exported(cmd, "HVD_NETWORK_INTERFACE"), "<absent>");
  EXPECT_TRUE(cmd.ucx_note.empty()) << cmd.ucx_note;
}

}  // namespace
}  // namespace hvd::launcher

// Host lists, the rank plan, and which addresses belong to this machine.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace hvd::launcher {

struct HostSlots {
  std::string host;
  int slots = 1;
};

// "-H a:2,b,[fe80::1]:4" (slots default to 1).
Result<std::vector<HostSlots>> ParseHostList(const std::string& spec);

// A hostfile: one host a line, "host", "host:N" or "host slots=N"; blank lines
// and text after '#' are ignored.
Result<std::vector<HostSlots>> ParseHostfile(const std::string& path);

// The hostfile an MPI launcher environment names (the MPI Operator's
// OMPI_MCA_orte_default_hostfile, Open MPI 5's PRTE_MCA_prte_default_hostfile,
// Intel MPI's I_MPI_HYDRA_HOST_FILE, MPICH's HYDRA_HOST_FILE), or "".
std::string HostfileFromEnvironment(std::string* variable);

// The MPI Operator's host discovery script beside its hostfile
// (/etc/mpi/discover_hosts.sh next to /etc/mpi/hostfile), when it is there
// and executable; "" otherwise.
std::string DiscoveryScriptBeside(const std::string& hostfile);

// A host discovery script's output: one host a line, "host" or "host:N"
// (default_slots when no N is given); blank lines and text after '#' are
// ignored. A host listed twice, or a line that is not one host, is an error.
Result<std::vector<HostSlots>> ParseDiscoveredHosts(const std::string& text, int default_slots);

// One rank's place in the job.
struct RankSlot {
  int rank = 0;
  int host_index = 0;  // into Plan::hosts
  int local_rank = 0;
  int local_size = 0;
  int cross_rank = 0;  // index of this host among hosts holding this local rank
  int cross_size = 0;  // number of hosts holding this local rank
};

struct Plan {
  std::vector<HostSlots> hosts;  // only hosts that received ranks, in list order
  std::vector<RankSlot> ranks;   // indexed by rank
  int size = 0;
};

// Fills hosts in list order, each up to its slots. Fails when np exceeds the
// total number of slots.
Result<Plan> BuildPlan(const std::vector<HostSlots>& hosts, int np);

// True for names and addresses of this machine: "localhost", loopback
// addresses, this machine's host name (full or short) and the addresses of its
// interfaces, and names that resolve to any of those.
bool IsLocalHost(const std::string& host);

// True when host is a loopback name or address (localhost, 127.x, ::1).
bool IsLoopbackHost(const std::string& host);

// The address (IPv4 preferred) of the named interface, or of the interface
// with an IPv4 address in a CIDR ("10.0.0.0/24").
Result<std::string> InterfaceAddress(const std::string& ifname);

// How this host reaches the job's other hosts, by the kernel's routes (not
// by interface names): the one interface every remote host is reached
// through, its address (where a store for them listens) and network. Where
// every remote host's address lies in that network, `cidr` is set: a
// setting that names the job's interface on every host whatever it is
// called there (for mpirun's btl/oob_tcp_if_include). An error, with the
// reason, where a host does not resolve, or hosts are reached through
// different interfaces (the caller falls back to DefaultAddress).
struct Reach {
  std::string ifname, address, cidr;
  std::string summary;  // "hvd-h2 (10.147.0.12) through eth0 (10.147.0.11, 10.147.0.0/24)"
};
Result<Reach> ReachHosts(const std::vector<std::string>& remote_hosts);

// The first interface that is up, not loopback and not a bridge or a virtual
// pair (docker*, br-*, virbr*, veth*); its IPv4 address, or a global IPv6 one.
// On success *ifname is set to the interface's name.
Result<std::string> DefaultAddress(std::string* ifname);

// "host:port", with IPv6 literals bracketed.
std::string JoinHostPort(const std::string& host, int port);

}  // namespace hvd::launcher

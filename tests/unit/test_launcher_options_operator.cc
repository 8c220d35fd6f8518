// hvdrun in an MPI Operator launcher pod (docs/kubernetes.md): the hostfile
// that OMPI_MCA_orte_default_hostfile names, in the operator's format, and
// its discover_hosts.sh output.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/hosts.h"
#include "launcher/options.h"

namespace {

using hvd::launcher::ParseArgs;
using hvd::launcher::ParseOutcome;
using hvd::launcher::ParseResult;

ParseResult Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "hvdrun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseArgs(static_cast<int>(argv.size()), argv.data());
}

// The file the operator mounts at /etc/mpi/hostfile (Open MPI flavour), in a
// temporary folder, named by the variable it sets; both gone afterwards.
class OperatorHostfile : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/hvd-mpiop-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/hostfile";
    std::ofstream(path_) << "digits-worker-0.digits.default.svc slots=2\n"
                            "digits-worker-1.digits.default.svc slots=2\n";
    setenv("OMPI_MCA_orte_default_hostfile", path_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("OMPI_MCA_orte_default_hostfile");
    std::remove(path_.c_str());
    rmdir(dir_.c_str());
  }
  std::string dir_, path_;
};

TEST_F(OperatorHostfile, HvdrunTakesTheHostsAndSlotsFromIt) {
  ParseResult r = Parse({"python3", "train.py"});
  ASSERT_EQ(r.outcome, ParseOutcome::kRun) << r.error;
  ASSERT_EQ(r.options.hosts.size(), 2u);
  EXPECT_EQ(r.options.hosts[0].host, "digits-worker-0.digits.default.svc");
  EXPECT_EQ(r.options.hosts[1].slots, 2);
  EXPECT_EQ(r.options.np, 4);  // every slot, as mpirun does
}

TEST_F(OperatorHostfile, ExplicitHostsAndDiscoveryWin) {
  ParseResult h = Parse({"-H", "a:1", "python3", "t.py"});
  ASSERT_EQ(h.outcome, ParseOutcome::kRun) << h.error;
  ASSERT_EQ(h.options.hosts.size(), 1u);
  EXPECT_EQ(h.options.hosts[0].host, "a");
  // An elastic job lists its hosts with the operator's discover_hosts.sh.
  ParseResult e = Parse({"-np", "2", "--min-np", "1", "--host-discovery-script",
                         "/etc/mpi/discover_hosts.sh", "python3", "t.py"});
  ASSERT_EQ(e.outcome, ParseOutcome::kRun) << e.error;
  EXPECT_FALSE(e.options.hosts_given);
}

// An elastic job in the launcher pod with no host option: the operator's
// discover_hosts.sh beside the hostfile, where it is there and executable;
// a job that is not elastic still reads the hostfile.
TEST_F(OperatorHostfile, ElasticJobRunsTheDiscoveryScriptBesideIt) {
  const std::string script = dir_ + "/discover_hosts.sh";
  std::ofstream(script) << "#!/bin/sh\necho digits-worker-0.digits.default.svc:2\n";
  ParseResult plain = Parse({"--min-np", "2", "python3", "t.py"});  // not executable yet
  ASSERT_EQ(plain.outcome, ParseOutcome::kRun) << plain.error;
  EXPECT_TRUE(plain.options.discovery_script.empty());
  EXPECT_TRUE(plain.options.hosts_given);
  ASSERT_EQ(chmod(script.c_str(), 0755), 0);
  ParseResult e = Parse({"--min-np", "2", "--max-np", "4", "python3", "t.py"});
  ASSERT_EQ(e.outcome, ParseOutcome::kRun) << e.error;
  EXPECT_EQ(e.options.discovery_script, script);
  EXPECT_EQ(e.options.discovery_origin, "beside OMPI_MCA_orte_default_hostfile's hostfile");
  EXPECT_FALSE(e.options.hosts_given);
  ParseResult fixed = Parse({"python3", "t.py"});
  ASSERT_EQ(fixed.outcome, ParseOutcome::kRun) << fixed.error;
  EXPECT_TRUE(fixed.options.discovery_script.empty());
  EXPECT_EQ(fixed.options.np, 4);
  std::remove(script.c_str());
}

TEST(OperatorFiles, DiscoverHostsOutputAndIntelFlavour) {
  auto d = hvd::launcher::ParseDiscoveredHosts(
      "digits-worker-0.digits.default.svc:2\ndigits-worker-1.digits.default.svc:2\n", 1);
  ASSERT_TRUE(d.ok()) << d.status().message();
  ASSERT_EQ(d.value().size(), 2u);
  EXPECT_EQ(d.value()[1].host, "digits-worker-1.digits.default.svc");
  EXPECT_EQ(d.value()[1].slots, 2);
  std::string var;
  setenv("I_MPI_HYDRA_HOST_FILE", "/etc/mpi/hostfile", 1);
  EXPECT_EQ(hvd::launcher::HostfileFromEnvironment(&var), "/etc/mpi/hostfile");
  EXPECT_EQ(var, "I_MPI_HYDRA_HOST_FILE");
  unsetenv("I_MPI_HYDRA_HOST_FILE");
  EXPECT_EQ(hvd::launcher::HostfileFromEnvironment(&var), "");
}

}  // namespace

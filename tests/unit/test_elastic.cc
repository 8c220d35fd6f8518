// Elastic jobs, worker side (docs/elastic.md): real worker processes
// (elastic_worker) against a fake launcher that hosts the store and answers
// joins as hvdrun would, so each membership step is the test's to choose.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/elastic/elastic.h"
#include "hvd.h"
#include "rendezvous/store.h"

extern char** environ;

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

std::string Str(const rdv::Bytes& b) { return std::string(b.begin(), b.end()); }
rdv::Bytes Bytes(const std::string& s) { return rdv::Bytes(s.begin(), s.end()); }

class FakeLauncher {
 public:
  FakeLauncher() {
    secret_ = rdv::NewSecret();
    auto s = rdv::StoreServer::Start("127.0.0.1", 0, secret_);
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (s.ok()) server_ = std::move(s).value();
    char dir[] = "/tmp/hvd-elastic-XXXXXX";
    EXPECT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  ~FakeLauncher() {
    for (pid_t p : pids_) {
      if (kill(p, 0) == 0) kill(p, SIGKILL);
      int st = 0;
      waitpid(p, &st, WNOHANG);
    }
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (system(cmd.c_str()) != 0) ADD_FAILURE() << "could not remove " << dir_;
  }

  pid_t Spawn(const std::string& worker, int64_t value, const std::string& mode,
              const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "HVD_", 4) == 0 && std::strncmp(*e, "HVD_TRANSPORT_PATH=", 19) != 0) continue;
      env.emplace_back(*e);
    }
    env.push_back("HVD_ELASTIC=1");
    env.push_back("HVD_ELASTIC_WORKER=" + worker);
    env.push_back("HVD_RENDEZVOUS_ADDR=127.0.0.1:" + std::to_string(server_->port()));
    env.push_back("HVD_SECRET=" + secret_);
    env.push_back("HVD_HOSTNAME=hostA");
    env.push_back("HVD_TRANSPORT=gloo");
    env.push_back("HVD_START_TIMEOUT=20");
    env.push_back("HVD_TRANSPORT_TIMEOUT=20");
    for (const auto& e : extra_env) env.push_back(e);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string v = std::to_string(value), m = mode, bin = ELASTIC_WORKER;
    char* argv[] = {bin.data(), v.data(), m.data(), nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string out = Out(worker);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const std::string err = dir_ + "/" + worker + ".err";
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    EXPECT_EQ(rc, 0) << "spawning " << bin;
    pids_.push_back(pid);
    return pid;
  }

  // Waits (bounded) for join n of worker.
  bool WaitJoin(const std::string& worker, int n, double timeout_s = 30) {
    const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
    rdv::Bytes v;
    while (Clock::now() < until) {
      if (server_->TryGet("elastic/join/" + worker + "/" + std::to_string(n), &v)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  void Answer(const std::string& worker, int n, const std::string& text) {
    server_->Set("elastic/assign/" + worker + "/" + std::to_string(n), Bytes(text));
  }
  void Set(const std::string& key, const std::string& value) { server_->Set(key, Bytes(value)); }

  // The exit status (or -1 if it did not end in time: then it is killed).
  int Wait(pid_t pid, double timeout_s = 60) {
    const auto until = Clock::now() + std::chrono::duration<double>(timeout_s);
    int st = 0;
    while (Clock::now() < until) {
      pid_t r = waitpid(pid, &st, WNOHANG);
      if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
  }
  std::string Output(const std::string& worker) const {
    std::ifstream in(Out(worker));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  std::string Out(const std::string& worker) const { return dir_ + "/" + worker + ".out"; }
  std::string secret_;
  std::unique_ptr<rdv::StoreServer> server_;
  std::string dir_;
  std::vector<pid_t> pids_;
};

// Three workers form epoch 0; one leaves; the two others see the change,
// reset, and form epoch 1 with the ranks the launcher gave (swapped, to show
// they come from the answer), see the hosts update, and compute with the new
// size; a last reset is answered "exit", which the worker reports.
TEST(Elastic, LeaveResetAndRejoin) {
  FakeLauncher L;
  const char* w[3] = {"hostA:0:0", "hostA:1:1", "hostA:2:2"};
  pid_t p0 = L.Spawn(w[0], 1, "stay"), p1 = L.Spawn(w[1], 10, "stay"), p2 = L.Spawn(w[2], 100, "leave");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(L.WaitJoin(w[i], 0)) << w[i];
  for (int i = 0; i < 3; ++i) L.Answer(w[i], 0, "ok 0 " + std::to_string(i) + " 3 0");
  L.Set("elastic/epoch", "0");
  EXPECT_EQ(L.Wait(p2), 0) << L.Output(w[2]);
  ASSERT_TRUE(L.WaitJoin(w[0], 1)) << L.Output(w[0]);
  ASSERT_TRUE(L.WaitJoin(w[1], 1)) << L.Output(w[1]);
  L.Set("elastic/hosts_version", "1");  // after the epoch's answer was prepared
  L.Answer(w[0], 1, "ok 1 1 2 0");
  L.Answer(w[1], 1, "ok 1 0 2 0");
  ASSERT_TRUE(L.WaitJoin(w[0], 2)) << L.Output(w[0]);
  ASSERT_TRUE(L.WaitJoin(w[1], 2)) << L.Output(w[1]);
  L.Answer(w[0], 2, "exit only 2 workers remain, fewer than --min-np 3");
  L.Answer(w[1], 2, "exit only 2 workers remain, fewer than --min-np 3");
  EXPECT_EQ(L.Wait(p0), 0) << L.Output(w[0]);
  EXPECT_EQ(L.Wait(p1), 0) << L.Output(w[1]);

  EXPECT_EQ(L.Output(w[2]),
            "joined epoch=0 rank=2 size=3 elastic=1 hosts_updated=0\nsum=111\n");
  for (int i = 0; i < 2; ++i) {
    const std::string out = L.Output(w[i]);
    const int r0 = i, r1 = 1 - i;
    const std::string head = "joined epoch=0 rank=" + std::to_string(r0) +
                             " size=3 elastic=1 hosts_updated=0\nsum=111\nlost a peer\n"
                             "joined epoch=1 rank=" + std::to_string(r1) +
                             " size=2 elastic=1 hosts_updated=1\nsum=11\n"
                             "last reset: status -14: ";
    EXPECT_EQ(out.substr(0, head.size()), head) << out;
    EXPECT_NE(out.find("fewer than --min-np 3"), std::string::npos) << out;
    EXPECT_NE(out.find(w[i]), std::string::npos) << "the message names the worker: " << out;
    EXPECT_NE(out.find("\nafter: status -14\n"), std::string::npos) << out;
  }
}

TEST(Elastic, JoinWaitIsBoundedByTheElasticTimeout) {
  FakeLauncher L;
  const auto t0 = Clock::now();
  pid_t p = L.Spawn("hostA:0:7", 1, "join", {"HVD_ELASTIC_TIMEOUT=1"});
  EXPECT_EQ(L.Wait(p, 30), 0);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(took, 15.0);
  const std::string out = L.Output("hostA:0:7");
  EXPECT_EQ(out.rfind("create: status -4: ", 0), 0u) << out;
  EXPECT_NE(out.find("worker hostA:0:7 waited 1 s (elastic timeout"), std::string::npos) << out;
}

TEST(Elastic, LauncherAnswersExitOrNonsense) {
  FakeLauncher L;
  pid_t a = L.Spawn("hostA:0:1", 1, "join"), b = L.Spawn("hostA:1:2", 1, "join");
  ASSERT_TRUE(L.WaitJoin("hostA:0:1", 0));
  ASSERT_TRUE(L.WaitJoin("hostA:1:2", 0));
  L.Answer("hostA:0:1", 0, "exit the job is over");
  L.Answer("hostA:1:2", 0, "ok 0 5 3 0");  // rank outside the size
  EXPECT_EQ(L.Wait(a), 0);
  EXPECT_EQ(L.Wait(b), 0);
  std::string out = L.Output("hostA:0:1");
  EXPECT_EQ(out.rfind("create: status -14: ", 0), 0u) << out;
  EXPECT_NE(out.find("the job is over"), std::string::npos) << out;
  out = L.Output("hostA:1:2");
  EXPECT_EQ(out.rfind("create: status -12: ", 0), 0u) << out;
  EXPECT_NE(out.find("'ok 0 5 3 0'"), std::string::npos) << out;
}

// A world of one size-1 epoch: no rendezvous, the local transport.
TEST(Elastic, EpochOfOne) {
  FakeLauncher L;
  pid_t p = L.Spawn("hostA:0:0", 1, "join");
  ASSERT_TRUE(L.WaitJoin("hostA:0:0", 0));
  L.Answer("hostA:0:0", 0, "ok 4 0 1 2");
  EXPECT_EQ(L.Wait(p), 0);
  EXPECT_EQ(L.Output("hostA:0:0"), "joined epoch=4 rank=0 size=1 elastic=1 hosts_updated=0\n");
}

TEST(Elastic, ParseAssignment) {
  auto a = ParseAssignment("ok 3 1 4 7", "w", 0);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->epoch, 3);
  EXPECT_EQ(a->rank, 1);
  EXPECT_EQ(a->size, 4);
  EXPECT_EQ(a->hosts_version, 7);
  for (const char* bad : {"ok", "ok 1 2 2 0", "ok -1 0 1 0", "ok 1 0 0 0", "ok 1 0 1 0 9",
                          "ok 1 x 2 0", "yes 1 0 2 0", ""}) {
    auto r = ParseAssignment(bad, "w", 2);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), HVD_ERR_RENDEZVOUS) << bad;
  }
  auto e = ParseAssignment("exit go home", "w", 1);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), HVD_ERR_MEMBERSHIP_CHANGED);
  EXPECT_NE(e.status().message().find("go home"), std::string::npos);
}

// Outside an elastic job: reset is refused, membership says so.
TEST(Elastic, NotElastic) {
  hvd_context_t ctx = nullptr;
  ASSERT_EQ(hvd_context_create(nullptr, &ctx), HVD_OK) << hvd_last_error();
  EXPECT_EQ(hvd_context_reset(ctx), HVD_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(hvd_last_error()).find("not in an elastic job"), std::string::npos);
  hvd_membership_t m{};
  m.struct_size = sizeof(m);
  m.epoch = 99;
  m.hosts_updated = 5;
  ASSERT_EQ(hvd_context_membership(ctx, &m), HVD_OK);
  EXPECT_EQ(m.elastic, 0);
  EXPECT_EQ(m.hosts_updated, 0);
  EXPECT_EQ(m.epoch, 0);
  EXPECT_EQ(hvd_context_membership(ctx, nullptr), HVD_ERR_INVALID_ARGUMENT);
  m.struct_size = 4;
  EXPECT_EQ(hvd_context_membership(ctx, &m), HVD_ERR_INVALID_ARGUMENT);
  // An older caller's smaller struct gets what fits.
  struct {
    size_t struct_size;
    int32_t elastic;
  } old{sizeof(old), 7};
  EXPECT_EQ(hvd_context_membership(ctx, reinterpret_cast<hvd_membership_t*>(&old)), HVD_OK);
  EXPECT_EQ(old.elastic, 0);
  EXPECT_EQ(hvd_context_reset(nullptr), HVD_ERR_NOT_INITIALIZED);
  EXPECT_EQ(hvd_context_destroy(ctx), HVD_OK);
  EXPECT_STREQ(hvd_status_string(HVD_ERR_MEMBERSHIP_CHANGED),
               "the elastic job's membership changed (reset the context: hvd_context_reset)");
}

}  // namespace
}  // namespace hvd

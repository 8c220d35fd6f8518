#include "launcher/job.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "launcher/job_metrics.h"
#include "launcher/flight_records.h"
#include "launcher/supervisor.h"
#include "rendezvous/store.h"

namespace hvd::launcher {
namespace {

// ---- readiness through a client, for torchrun-style nodes other than 0 -------
// The store lives on node 0; this node's hvdrun asks it which of its ranks
// have connected. Runs in one background thread so a slow or unreachable
// store never stalls output forwarding. The destructor stops and joins it:
// waits are cut short and a call blocked on a silent store is interrupted,
// so no thread outlives the job (a detached one raced the process's exit
// handlers). The longest the join can take is one connect attempt (1 s).
class RemoteReadiness {
 public:
  RemoteReadiness(std::string host, int port, std::string secret, std::vector<int> ranks)
      : ready_(ranks.size()) {
    for (auto& r : ready_) r = false;
    thread_ = std::thread([this, host = std::move(host), port, secret = std::move(secret),
                           ranks = std::move(ranks)] { Poll(host, port, secret, ranks); });
  }
  ~RemoteReadiness() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
      if (client_) client_->Interrupt();
    }
    cv_.notify_all();
    thread_.join();
  }
  RemoteReadiness(const RemoteReadiness&) = delete;
  RemoteReadiness& operator=(const RemoteReadiness&) = delete;
  bool ready(size_t i) const { return ready_[i]; }

 private:
  // Sleeps up to ms; false once stopping.
  bool Pause(int ms) {
    std::unique_lock<std::mutex> l(mu_);
    return !cv_.wait_for(l, std::chrono::milliseconds(ms), [this] { return stop_; });
  }
  void Poll(const std::string& host, int port, const std::string& secret,
            const std::vector<int>& ranks) {
    std::vector<std::string> keys;
    for (int r : ranks) keys.push_back("ready/" + std::to_string(r));
    std::shared_ptr<rdv::StoreClient> client;
    for (;;) {
      if (!client) {
        auto c = rdv::StoreClient::Connect(host, port, secret, 1.0);
        if (!c.ok()) {
          if (!Pause(250)) return;
          continue;
        }
        client = std::shared_ptr<rdv::StoreClient>(std::move(c).value());
        std::lock_guard<std::mutex> g(mu_);
        if (stop_) return;
        client_ = client;
      }
      auto res = client->Check(keys);
      if (!res.ok()) {
        std::lock_guard<std::mutex> g(mu_);
        client_.reset();
        client.reset();
        if (stop_) return;
        continue;
      }
      bool all = true;
      for (size_t i = 0; i < ranks.size() && i < res->size(); ++i) {
        if ((*res)[i]) ready_[i] = true;
        all = all && ready_[i];
      }
      if (all || !Pause(200)) return;
    }
  }

  std::vector<std::atomic<bool>> ready_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                          // guarded by mu_
  std::shared_ptr<rdv::StoreClient> client_;  // guarded by mu_; the one in use
  std::thread thread_;
};

// ---- the job ---------------------------------------------------------------
struct Rank {
  RankSlot slot;
  Child child;
};

class Job : public Supervisor {
 public:
  Job(const Options& o, const Plan& p) : Supervisor(o), plan_(p) {}
  int Run();

 private:
  int Prepare();  // 0 = ok, else an exit code
  void SpawnAll();
  std::vector<std::pair<std::string, std::string>> RankVars(const Rank& r) const;
  void OnExit(Child& c, int wstatus) override;
  void OnTurn() override;
  void UpdateReady();
  void CheckStartTimeout();
  // --flight-recorder: the ranks as sources of records; the records asked
  // for before a failed job stops, and the remote ones copied after.
  std::vector<RecordSource> RecordSources() const;
  void BeforeStop() override;
  void CollectRecords();

  const Plan& plan_;
  std::vector<Rank> ranks_;  // never resized once filled: children point into it
  std::unique_ptr<RemoteReadiness> remote_ready_;
  std::unique_ptr<JobMetrics> metrics_;  // --metrics-port, --summary
  Clock::time_point start_time_;
};

int Job::Prepare() {
  std::vector<std::string> hosts;
  ranks_.resize(plan_.ranks.size());
  for (size_t i = 0; i < plan_.ranks.size(); ++i) {
    Rank& r = ranks_[i];
    r.slot = plan_.ranks[i];
    r.child.host = plan_.hosts[r.slot.host_index].host;
    r.child.remote = IsRemote(r.child.host);
    r.child.who = "rank " + std::to_string(r.slot.rank) + " (host " + r.child.host + ")";
    hosts.push_back(r.child.host);
  }
  int rc = Setup(hosts, false);
  if (rc != 0) return rc;

  // Every rank started here shares this machine's CPUs, whatever name its
  // host has in the list (localhost, 127.0.0.1, ...).
  int local = 0;
  for (const auto& r : ranks_) local += r.child.remote ? 0 : 1;
  auto blocks = LocalCpuBlocks(local);
  size_t next = 0;
  for (auto& r : ranks_) {
    if (r.child.remote) {
      // Bound on its host, among that host's ranks (hvdrun --bind-exec).
      r.child.bind_rank = r.slot.local_rank;
      r.child.bind_size = r.slot.local_size;
      NoteRemoteBinding();
    } else if (!blocks.empty()) {
      r.child.cpus = blocks[next++];
    }
  }
  if (!server_) {
    std::vector<int> ids;
    for (const auto& r : ranks_) ids.push_back(r.slot.rank);
    remote_ready_ = std::make_unique<RemoteReadiness>(adv_host_, port_, secret_, ids);
  }

  if (o_.verbose) {
    if (o_.torchrun_style) {
      Log("plan: node " + std::to_string(o_.node_rank) + " of " + std::to_string(o_.nnodes) +
          ", ranks " + std::to_string(ranks_.front().slot.rank) + "-" +
          std::to_string(ranks_.back().slot.rank) + " of " + std::to_string(plan_.size));
    } else {
      Log("plan: " + std::to_string(plan_.size) + " rank(s) on " +
          std::to_string(plan_.hosts.size()) + " host(s)");
      int first = 0;
      for (size_t h = 0; h < plan_.hosts.size(); ++h) {
        int n = plan_.hosts[h].slots;
        bool remote = ranks_[first].child.remote;
        Log("  " + plan_.hosts[h].host + (remote ? " (ssh)" : " (local)") + ": ranks " +
            std::to_string(first) + (n > 1 ? "-" + std::to_string(first + n - 1) : ""));
        first += n;
      }
    }
    Log(std::string("rendezvous store: ") + (server_ ? "serving at " : "on node 0 at ") + rdv_addr_);
  }
  return 0;
}

std::vector<std::pair<std::string, std::string>> Job::RankVars(const Rank& r) const {
  std::vector<std::pair<std::string, std::string>> v = CommonVars(r.child.host);
  auto add = [&](const char* k, const std::string& val) { v.emplace_back(k, val); };
  const RankSlot& s = r.slot;
  add("HVD_RANK", std::to_string(s.rank));
  add("HVD_SIZE", std::to_string(plan_.size));
  add("HVD_LOCAL_RANK", std::to_string(s.local_rank));
  add("HVD_LOCAL_SIZE", std::to_string(s.local_size));
  add("HVD_CROSS_RANK", std::to_string(s.cross_rank));
  add("HVD_CROSS_SIZE", std::to_string(s.cross_size));
  add("RANK", std::to_string(s.rank));
  add("WORLD_SIZE", std::to_string(plan_.size));
  add("LOCAL_RANK", std::to_string(s.local_rank));
  add("LOCAL_WORLD_SIZE", std::to_string(s.local_size));
  // Horovod's names for the same numbers (horovodrun's Gloo launch sets
  // them), for scripts and tools that read them.
  add("HOROVOD_RANK", std::to_string(s.rank));
  add("HOROVOD_SIZE", std::to_string(plan_.size));
  add("HOROVOD_LOCAL_RANK", std::to_string(s.local_rank));
  add("HOROVOD_LOCAL_SIZE", std::to_string(s.local_size));
  add("HOROVOD_CROSS_RANK", std::to_string(s.cross_rank));
  add("HOROVOD_CROSS_SIZE", std::to_string(s.cross_size));
  return v;
}

void Job::SpawnAll() {
  // --output-filename: DIR/rank.N, N padded with zeros to the width of the
  // largest rank (horovodrun's layout).
  const size_t width = std::to_string(std::max(plan_.size - 1, 0)).size();
  for (auto& r : ranks_) {
    HandleEvents();
    if (stopping_) return;
    if (!o_.output_filename.empty()) {
      std::string n = std::to_string(r.slot.rank);
      if (n.size() < width) n.insert(0, width - n.size(), '0');
      r.child.output_dir = o_.output_filename + "/rank." + n;
    }
    Status st = SpawnChild(r.child, RankVars(r), {}, "[" + std::to_string(r.slot.rank) + "]");
    if (!st.ok()) {
      Log("error: cannot start " + r.child.who + ": " + st.message());
      BeginStop(1);
      return;
    }
  }
}

void Job::OnExit(Child& c, int wstatus) {
  ExitInfo e = DescribeExit(c, wstatus);
  if (e.failed && !stopping_) {
    // A rank that fails once the start timeout is over, while others have
    // not started (their ssh login hangs) or not reached the store, fails
    // for them as a rule: the library's own start timeout (HVD_START_TIMEOUT,
    // as long, counted from the rank's start, so never over before hvdrun's)
    // ended its wait for them. Those are said first, as the start timeout
    // (which then stops the job), and this exit after them.
    CheckStartTimeout();
    Log(c.who + " " + e.what);
    BeginStop(e.code);
  } else if (o_.verbose || (e.failed && exit_code_ < 0)) {
    Log(c.who + " " + e.what);
  }
}

void Job::OnTurn() {
  UpdateReady();
  CheckStartTimeout();
}

void Job::UpdateReady() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (r.child.ready || !r.child.started) continue;
    bool now = false;
    if (server_) {
      rdv::Bytes v;
      now = server_->TryGet("ready/" + std::to_string(r.slot.rank), &v);
    } else if (remote_ready_) {
      now = remote_ready_->ready(i);
    }
    if (now) {
      r.child.ready = true;
      if (o_.verbose) Log(r.child.who + " connected to the rendezvous store");
    }
  }
}

void Job::CheckStartTimeout() {
  if (stopping_ || o_.start_timeout_s <= 0) return;
  if (SecondsSince(start_time_) < o_.start_timeout_s) return;
  // A remote rank whose ssh never brought the script's start marker did not
  // start at all: its login hangs (authentication), and the store is not to
  // blame. Said first, a line a host.
  std::vector<const Rank*> missing;
  std::vector<std::string> login_hosts;
  std::map<std::string, std::vector<int>> login_ranks;
  for (const auto& r : ranks_) {
    if (!r.child.running || r.child.ready) continue;
    if (r.child.remote && !r.child.remote_started) {
      if (!login_ranks.count(r.child.host)) login_hosts.push_back(r.child.host);
      login_ranks[r.child.host].push_back(r.slot.rank);
    } else {
      missing.push_back(&r);
    }
  }
  if (missing.empty() && login_hosts.empty()) return;
  constexpr size_t kMaxHostLines = 8;
  for (size_t k = 0; k < login_hosts.size() && k < kMaxHostLines; ++k) {
    const std::string& h = login_hosts[k];
    const std::vector<int>& ids = login_ranks[h];
    std::string who = ids.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < ids.size(); ++i) who += (i ? ", " : "") + std::to_string(ids[i]);
    Log("start timeout: " + who + " (host " + h + "): " +
        LoginNotCompleted(h, o_.ssh_port, FormatSeconds(o_.start_timeout_s)));
  }
  if (login_hosts.size() > kMaxHostLines) {
    std::string more;
    for (size_t k = kMaxHostLines; k < login_hosts.size(); ++k) {
      more += (more.empty() ? "" : ", ") + login_hosts[k];
    }
    Log("start timeout: the ssh login did not complete on " +
        std::to_string(login_hosts.size() - kMaxHostLines) + " more host(s) either: " + more);
  }
  if (missing.empty()) {
    BeginStop(1);
    return;
  }
  std::string list;
  for (size_t i = 0; i < missing.size(); ++i) {
    if (i == 8 && missing.size() > 10) {
      list += ", ... (" + std::to_string(missing.size() - 8) + " more)";
      break;
    }
    list += (i ? ", " : "") + missing[i]->child.who;
  }
  Log(std::string("start timeout: ") + std::to_string(missing.size()) + " running rank(s) did not " +
      "connect to the rendezvous store at " + rdv_addr_ + " within " +
      FormatSeconds(o_.start_timeout_s) + " s: " + list);
  BeginStop(1);
}

int Job::Run() {
  int rc = Prepare();
  if (rc != 0) return rc;
  start_time_ = Clock::now();
  if (o_.metrics_port >= 0 || o_.summary) {
    metrics_ = std::make_unique<JobMetrics>(server_.get(), plan_.size,
                                            [this](const std::string& l) { Log(l); });
    if (!metrics_->Start(o_.metrics_addr, o_.metrics_port)) return 1;
  }
  SpawnAll();
  Loop();
  if (metrics_) metrics_->End(o_.summary);
  rc = Finish();
  if (rc != 0 && !o_.flight_recorder.empty()) CollectRecords();
  return rc;
}

std::vector<RecordSource> Job::RecordSources() const {
  std::vector<RecordSource> v;
  for (const auto& r : ranks_) {
    if (!r.child.started) continue;
    v.push_back({r.slot.rank, r.child.host, r.child.remote, r.child.pid, r.child.running,
                 r.child.remote ? r.child.stdin_w.get() : -1});
  }
  return v;
}

void Job::BeforeStop() {
  if (o_.flight_recorder.empty()) return;
  constexpr double kWaitS = 2;  // a rank's loop serves the request within its heartbeat
  const int n = RequestFlightRecords(o_.flight_recorder, RecordSources(), kWaitS);
  if (o_.verbose) Log("flight recorder: " + std::to_string(n) + " local rank(s) wrote a record");
}

void Job::CollectRecords() {
  RemoteSpec ssh;
  ssh.port = o_.ssh_port;
  ssh.identity = o_.ssh_identity;
  ssh.ssh_program = o_.ssh_program;
  ssh.extra_args = o_.ssh_extra_args;
  ssh.connect_timeout_s = 10;
  const auto since = std::chrono::system_clock::now() -
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(
                         Clock::now() - start_time_);
  constexpr double kCopyTimeoutS = 20;
  for (const std::string& line :
       CollectFlightRecords(o_.flight_recorder, RecordSources(), ssh, since, kCopyTimeoutS)) {
    Log(line);
  }
  Log("flight recorder: the ranks' records are in " + o_.flight_recorder +
      " (python -m hvd.trace " + o_.flight_recorder + ")");
}

}  // namespace

int RunJob(const Options& opts, const Plan& plan) {
  Job job(opts, plan);
  return job.Run();
}

}  // namespace hvd::launcher

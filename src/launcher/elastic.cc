// The elastic driver: hvdrun decides membership, epoch by epoch, through the
// rendezvous store (the protocol is in docs/elastic.md, "Protocol between
// workers and hvdrun"). Every turn of the loop (about every 20 ms):
//
// - exits: a worker that fails (non-zero, or a signal) gets its host left
//   out (blacklisted: no new workers start there, for good or for a random
//   time in the cooldown range; its live workers go on);
// - hosts: the discovery script runs every second (killed when it hangs; a
//   failure or bad output keeps the last good list); the hosts in use are the
//   listed ones that are not blacklisted. When they change,
//   elastic/hosts_version goes up, workers on hosts gone are stopped, and
//   hosts added get workers, up to --max-np;
// - epochs: once a live worker asks to join (or at the start), hvdrun waits
//   for every live worker to ask, drops one that does not within the start
//   timeout, and answers all at once: ranks in the previous epoch's order,
//   new workers after them in host list order. Below --min-np it waits up to
//   the elastic timeout for more, then ends the job.
//
// Once a worker exits 0 the job is finishing: no more workers start. The job
// ends when no worker is left: successfully when every worker of the last
// epoch (and any started since) exited 0.
#include "launcher/elastic.h"

#include <signal.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "launcher/hosts.h"
#include "launcher/job_metrics.h"
#include "launcher/supervisor.h"

namespace hvd::launcher {
namespace {

constexpr int kTurnMs = 20;
constexpr double kDiscoveryPeriodS = 1.0;
constexpr double kDiscoveryTimeoutS = 10.0;
// A discovery script's output is taken this long after it exited even when
// something it started still holds the pipe open.
constexpr double kDiscoveryDrainS = 1.0;
// Workers wait this much longer for an answer than hvdrun may take to give it.
constexpr double kAnswerMarginS = 5.0;

// What a fixed-size job sets: an elastic worker must not inherit them from
// hvdrun's environment (its rank comes with every epoch).
const std::vector<std::string> kRankVars = {
    "HVD_RANK",           "HVD_SIZE",           "HVD_LOCAL_RANK",     "HVD_LOCAL_SIZE",
    "HVD_CROSS_RANK",     "HVD_CROSS_SIZE",     "RANK",               "WORLD_SIZE",
    "LOCAL_RANK",         "LOCAL_WORLD_SIZE",   "HOROVOD_RANK",       "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"};

rdv::Bytes ToBytes(const std::string& s) { return rdv::Bytes(s.begin(), s.end()); }

std::string HostList(const std::vector<HostSlots>& hosts) {
  if (hosts.empty()) return "(none)";
  std::string s;
  for (const auto& h : hosts) s += (s.empty() ? "" : ", ") + h.host + ":" + std::to_string(h.slots);
  return s;
}

bool SameHosts(const std::vector<HostSlots>& a, const std::vector<HostSlots>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].host != b[i].host || a[i].slots != b[i].slots) return false;
  }
  return true;
}

const HostSlots* FindHost(const std::vector<HostSlots>& hosts, const std::string& name) {
  for (const auto& h : hosts) {
    if (h.host == name) return &h;
  }
  return nullptr;
}

struct Worker {
  Child child;
  std::string id;  // <host>:<slot>:<serial>
  std::string host;
  int slot = 0;
  int serial = 0;
  int64_t joins = 0;          // joins answered: the next is elastic/join/<id>/<joins>
  bool join_pending = false;  // that key exists, unanswered
  int64_t epoch = -1;         // the last epoch it was answered "ok" for, and its rank there
  int rank = -1;
  Clock::time_point started;
  bool dropped = false;       // stopped by hvdrun: its exit is no failure

  bool Live() const { return child.running && !dropped; }
  std::string JoinKey() const { return "elastic/join/" + id + "/" + std::to_string(joins); }
  std::string AssignKey() const { return "elastic/assign/" + id + "/" + std::to_string(joins); }
};

struct Failure {
  std::string what;  // "worker h:0:1 exited with code 3"
  int code = 1;
};

class ElasticJob : public Supervisor {
 public:
  explicit ElasticJob(const Options& o)
      : Supervisor(o), rng_(std::random_device{}()),
        max_np_(o.max_np > 0 ? o.max_np : INT_MAX),
        worker_timeout_(FormatSeconds(o.elastic_timeout_s + std::max(0.0, o.start_timeout_s) +
                                      kAnswerMarginS)) {}
  int Run();

 private:
  void OnExit(Child& c, int wstatus) override;
  void OnTurn() override;
  bool Alive() const override;
  int MaxWaitMs() const override { return kTurnMs; }

  bool Ending() const;
  int LiveCount() const;
  bool StartStoreFor(const std::vector<HostSlots>& hosts);
  void PollDiscovery();
  void DiscoveryWarning(const std::string& msg);
  void UpdateHosts();
  void Blacklist(const std::string& host, std::string* how);
  void Fill(int target);
  bool SpawnWorker(const std::string& host, int slot);
  std::vector<int> LocalCpus();
  void Drop(Worker& w, const std::string& why, bool term);
  void Form();
  void FormEpoch(std::vector<Worker*> members);
  void EndJob(const std::string& why);

  std::mt19937_64 rng_;
  const int max_np_;
  // HVD_ELASTIC_TIMEOUT: how long a worker waits for an answer. hvdrun may
  // take the start timeout (a worker that does not ask) and then the elastic
  // timeout (too few workers) before it answers, so workers wait that long
  // and a little more: hvdrun's answer, even `exit`, comes first.
  const std::string worker_timeout_;
  Clock::time_point start_;

  // Hosts.
  bool have_list_ = false;           // a host list arrived (from -H, or the script)
  std::vector<HostSlots> listed_;    // the last good list
  std::vector<HostSlots> usable_;    // listed_ less the blacklisted hosts: what workers run on
  bool hosts_known_ = false;         // usable_ was set once (bumps count from then on)
  std::map<std::string, Clock::time_point> blacklist_;  // host -> until (max: for good)
  std::set<std::string> warned_unreachable_;
  int64_t hosts_version_ = 0;
  bool fill_wanted_ = false;

  // The discovery script's runs.
  Child discovery_;
  bool discovery_active_ = false;    // a run whose result is not taken yet
  bool discovery_timed_out_ = false;
  int discovery_wstatus_ = 0;
  Clock::time_point discovery_started_, discovery_exited_, next_discovery_;
  std::string last_warning_;

  // Workers and epochs.
  std::vector<std::unique_ptr<Worker>> workers_;  // every one started, in order
  int serial_ = 0;
  bool spawned_any_ = false;
  bool finishing_ = false;           // a worker exited 0: no more workers are started
  int64_t epoch_ = -1;               // the last epoch formed
  std::unique_ptr<JobMetrics> metrics_;  // --metrics-port, --summary
  int resets_ = 0;                   // epochs formed after epoch 0
  bool forming_ = false;
  Clock::time_point forming_since_;
  bool below_min_ = false;
  Clock::time_point below_min_since_;
  std::vector<Failure> unrecovered_;  // failures since the last epoch formed
};

int ElasticJob::LiveCount() const {
  int n = 0;
  for (const auto& w : workers_) n += w->Live() ? 1 : 0;
  return n;
}

// No more workers will come: the job is stopping, or every worker is gone.
bool ElasticJob::Ending() const {
  if (stopping_) return true;
  if (!spawned_any_) return false;
  for (const auto& w : workers_) {
    if (w->child.running) return false;
  }
  return true;
}

bool ElasticJob::Alive() const {
  if (discovery_.running) return true;
  for (const auto& w : workers_) {
    if (w->child.running) return true;
  }
  return !stopping_ && !spawned_any_;
}

bool ElasticJob::StartStoreFor(const std::vector<HostSlots>& hosts) {
  std::vector<std::string> names;
  for (const auto& h : hosts) names.push_back(h.host);
  int rc = StartStore(names, !o_.discovery_script.empty());
  if (rc != 0) {
    BeginStop(rc);
    return false;
  }
  server_->Set("elastic/hosts_version", ToBytes("0"));
  if (!o_.discovery_origin.empty()) {
    Log("host discovery script: " + o_.discovery_script + " (" + o_.discovery_origin + ")");
  }
  if (o_.metrics_port >= 0 || o_.summary) {  // each epoch's ranks (SetEpoch)
    metrics_ = std::make_unique<JobMetrics>(server_.get(), 0, [this](const std::string& l) { Log(l); });
    if (!metrics_->Start(o_.metrics_addr, o_.metrics_port)) {
      BeginStop(1);
      return false;
    }
  }
  if (o_.verbose) {
    Log("elastic job: --min-np " + std::to_string(o_.min_np) + ", -np " + std::to_string(o_.np) +
        ", --max-np " + (o_.max_np > 0 ? std::to_string(o_.max_np) : std::string("(every slot)")));
    Log("rendezvous store: serving at " + rdv_addr_);
  }
  return true;
}

void ElasticJob::DiscoveryWarning(const std::string& msg) {
  if (msg == last_warning_) return;  // the same trouble every second: said once
  last_warning_ = msg;
  Log("warning: host discovery script: " + msg + "; keeping the last host list (" +
      (have_list_ ? HostList(listed_) : std::string("none yet")) + ")");
}

void ElasticJob::PollDiscovery() {
  if (o_.discovery_script.empty()) return;
  Clock::time_point now = Clock::now();
  if (discovery_active_) {
    if (discovery_.running) {
      if (!discovery_timed_out_ && SecondsSince(discovery_started_) > kDiscoveryTimeoutS) {
        discovery_timed_out_ = true;
        DiscoveryWarning("did not finish within " + FormatSeconds(kDiscoveryTimeoutS) +
                         " s: killed");
        StopChild(discovery_, false, 0);  // SIGKILL to its group at once
      }
      return;
    }
    bool drained = !discovery_.out_r.valid();
    if (!drained && SecondsSince(discovery_exited_) < kDiscoveryDrainS && !discovery_timed_out_) return;
    discovery_active_ = false;
    for (Fd* fd : {&discovery_.out_r, &discovery_.err_r}) {
      if (fd->valid()) fd->reset();
    }
    if (discovery_.err) discovery_.err->Finish();
    if (!discovery_timed_out_) {
      ExitInfo e = DescribeExit(discovery_, discovery_wstatus_);
      if (e.failed) {
        DiscoveryWarning(e.what);
      } else {
        auto hosts = ParseDiscoveredHosts(discovery_.captured, o_.default_slots);
        if (!hosts.ok()) {
          DiscoveryWarning("bad output: " + hosts.status().message());
        } else {
          if (!last_warning_.empty()) Log("host discovery script: works again");
          last_warning_.clear();
          if (o_.verbose && (!have_list_ || !SameHosts(*hosts, listed_))) {
            Log("host discovery script: " + HostList(*hosts));
          }
          listed_ = std::move(hosts).value();
          have_list_ = true;
        }
      }
    }
  }
  if (Ending() || now < next_discovery_) return;
  discovery_.who = "host discovery script";
  discovery_timed_out_ = false;
  discovery_started_ = now;
  next_discovery_ = now + std::chrono::milliseconds(static_cast<long>(kDiscoveryPeriodS * 1000));
  Status st = SpawnHelper(discovery_, {"/bin/sh", "-c", o_.discovery_script},
                          "hvdrun: host discovery script: ");
  if (!st.ok()) {
    DiscoveryWarning("cannot start it: " + st.message());
    return;
  }
  discovery_active_ = true;
}

void ElasticJob::Blacklist(const std::string& host, std::string* how) {
  Clock::time_point until = Clock::time_point::max();
  if (o_.cooldown_given) {
    std::uniform_real_distribution<double> d(o_.cooldown_min_s, o_.cooldown_max_s);
    double s = o_.cooldown_min_s < o_.cooldown_max_s ? d(rng_) : o_.cooldown_min_s;
    until = Clock::now() + std::chrono::milliseconds(static_cast<long>(s * 1000));
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f", s);
    *how = "host " + host + " is left out for " + buf + " s";
  } else {
    *how = "host " + host + " is left out for good";
  }
  auto it = blacklist_.find(host);
  if (it == blacklist_.end() || it->second < until) blacklist_[host] = until;
}

void ElasticJob::UpdateHosts() {
  if (!have_list_) return;
  Clock::time_point now = Clock::now();
  for (auto it = blacklist_.begin(); it != blacklist_.end();) {
    if (it->second <= now) {
      if (o_.verbose) Log("host " + it->first + ": its blacklist cooldown is over");
      it = blacklist_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<HostSlots> usable;
  for (const auto& h : listed_) {
    if (!blacklist_.count(h.host)) usable.push_back(h);
  }
  if (hosts_known_ && SameHosts(usable, usable_)) return;

  bool added = false;
  for (const auto& h : usable) {
    const HostSlots* old = FindHost(usable_, h.host);
    added = added || old == nullptr || h.slots > old->slots;
  }
  // Workers on hosts (or slots) the list no longer has are stopped. A
  // blacklisted host gets no new workers, but its live ones go on: one
  // worker's failure says little about the others (on one host, stopping
  // them would end every job at its first failure).
  bool removed = false;
  for (auto& w : workers_) {
    if (!w->Live()) continue;
    const HostSlots* now_h = FindHost(listed_, w->host);
    if (now_h != nullptr && w->slot < now_h->slots) continue;
    std::string why = now_h == nullptr ? "its host " + w->host + " was removed"
                                       : "its slot on host " + w->host + " was removed";
    Log("stopping worker " + w->id + ": " + why);
    Drop(*w, why, true);
    removed = true;
  }
  usable_ = usable;
  // Workers learn of hosts added (they may grow the job) and of workers
  // stopped; a host only blacklisted changes nothing for them.
  if (hosts_known_ && (added || removed)) {
    ++hosts_version_;
    server_->Set("elastic/hosts_version", ToBytes(std::to_string(hosts_version_)));
  }
  hosts_known_ = true;
  if (o_.verbose) {
    Log("hosts: " + HostList(usable_) + " (hosts_version " + std::to_string(hosts_version_) + ")");
  }
  if (added) fill_wanted_ = true;
}

bool ElasticJob::SpawnWorker(const std::string& host, int slot) {
  auto w = std::make_unique<Worker>();
  w->host = host;
  w->slot = slot;
  w->serial = serial_++;
  w->id = host + ":" + std::to_string(slot) + ":" + std::to_string(w->serial);
  w->child.host = host;
  w->child.remote = IsRemote(host);
  w->child.who = "worker " + w->id;
  if (w->child.remote && !IsLoopbackHost(host) && IsLoopbackHost(adv_host_) &&
      warned_unreachable_.insert(host).second) {
    Log("warning: host " + host + " is not this machine, but the rendezvous store listens on " +
        adv_host_ + " (the first host list named only loopback hosts): its workers cannot reach "
        "it; give --network-interface");
  }
  if (w->child.remote) {
    // Bound on its host by its slot among the host's slots: a live worker's
    // slot is its own, and one started in a failed one's place takes over
    // its slot and so its CPUs.
    const HostSlots* h = FindHost(usable_, host);
    if (h != nullptr && slot < h->slots) {
      w->child.bind_rank = slot;
      w->child.bind_size = h->slots;
    }
    NoteRemoteBinding();
  } else {
    w->child.cpus = LocalCpus();
  }
  auto vars = CommonVars(host);
  vars.emplace_back("HVD_ELASTIC", "1");
  vars.emplace_back("HVD_ELASTIC_WORKER", w->id);
  vars.emplace_back("HVD_ELASTIC_TIMEOUT", worker_timeout_);
  w->started = Clock::now();
  Worker& ref = *w;
  workers_.push_back(std::move(w));
  Status st = SpawnChild(ref.child, vars, kRankVars, "[" + ref.id + "]");
  if (!st.ok()) {
    Log("error: cannot start " + ref.child.who + ": " + st.message());
    BeginStop(1);
    return false;
  }
  spawned_any_ = true;
  return true;
}

// The CPU binding of a worker about to start on this machine. Workers come
// and go, so the CPUs are shared out among every worker this machine may
// hold at once (its hosts' slots in the host list, up to --max-np), and the
// new worker gets a share no live local worker holds (with --bind-to core:
// the CPU the fewest hold). Empty: not bound.
std::vector<int> ElasticJob::LocalCpus() {
  if (o_.bind_to == BindMode::kNone) return {};
  long slots = 0;
  for (const auto& h : usable_) {
    if (!IsRemote(h.host)) slots += h.slots;
  }
  std::vector<std::vector<int>> taken;
  for (const auto& w : workers_) {
    if (w->child.running && !w->child.remote) taken.push_back(w->child.cpus);
  }
  long n = std::max<long>(std::min<long>(slots, max_np_), static_cast<long>(taken.size()) + 1);
  auto blocks = LocalCpuBlocks(static_cast<int>(std::min<long>(n, INT_MAX)));
  auto cpus = PickBlock(blocks, taken, o_.bind_to == BindMode::kAuto);
  if (cpus.empty() && !blocks.empty() && o_.verbose) {
    Log("--bind-to auto: every share of the CPUs is held by a live local worker: the next one "
        "is not bound");
  }
  return cpus;
}

// Starts workers on free slots, in host list order, until target workers live.
void ElasticJob::Fill(int target) {
  if (finishing_) return;
  target = std::min(target, max_np_);
  int live = LiveCount();
  for (const auto& h : usable_) {
    for (int slot = 0; slot < h.slots && live < target; ++slot) {
      bool taken = false;
      for (const auto& w : workers_) {
        taken = taken || (w->child.running && w->host == h.host && w->slot == slot);
      }
      if (taken) continue;
      if (!SpawnWorker(h.host, slot)) return;
      ++live;
    }
  }
}

// Answers an unanswered join with `exit <why>`, and stops the worker:
// SIGTERM now (term), or SIGKILL after the grace period if it has not exited.
void ElasticJob::Drop(Worker& w, const std::string& why, bool term) {
  if (w.dropped) return;
  w.dropped = true;
  if (w.join_pending || server_->TryGet(w.JoinKey(), nullptr)) {
    server_->Set(w.AssignKey(), ToBytes("exit " + why));
    ++w.joins;
    w.join_pending = false;
  }
  StopChild(w.child, term);
}

void ElasticJob::EndJob(const std::string& why) {
  Log("error: " + why + ": ending the job");
  for (auto& w : workers_) {
    if (!w->Live()) continue;
    // A worker waiting for an answer gets `exit` and the grace period to end
    // by itself; the others SIGTERM.
    bool waiting = w->join_pending || server_->TryGet(w->JoinKey(), nullptr);
    Drop(*w, "the job ends: " + why, !waiting);
  }
  BeginStop(1, false);
}

void ElasticJob::Form() {
  Clock::time_point now = Clock::now();
  bool any_pending = false;
  for (auto& w : workers_) {
    if (!w->Live()) continue;
    if (!w->join_pending && server_->TryGet(w->JoinKey(), nullptr)) {
      w->join_pending = true;
      w->child.ready = true;
      if (o_.verbose) Log(w->child.who + " asks to join (join " + std::to_string(w->joins) + ")");
    }
    any_pending = any_pending || w->join_pending;
  }
  if (!forming_ && (epoch_ < 0 || any_pending)) {
    forming_ = true;
    forming_since_ = now;
    if (o_.verbose && epoch_ >= 0) Log("forming epoch " + std::to_string(epoch_ + 1));
  }

  // Below --min-np for longer than the elastic timeout ends the job. The
  // clock starts when the count falls below it (not when workers ask: hvdrun
  // answers before they give up), and while an epoch is being formed it runs
  // on if the count rises for a while. Not for workers left running after
  // others finished, unless they ask to go on.
  int n = LiveCount();
  if (n >= o_.min_np || (finishing_ && !forming_)) {
    if (!forming_) below_min_ = false;
  } else if (!below_min_) {
    below_min_ = true;
    below_min_since_ = now;
    if (o_.verbose || epoch_ >= 0) {
      Log(std::to_string(n) + " worker(s), fewer than --min-np " + std::to_string(o_.min_np) +
          ": waiting up to " + o_.elastic_timeout_text + " s (the elastic timeout) for more");
    }
  } else if (std::chrono::duration<double>(now - below_min_since_).count() >= o_.elastic_timeout_s) {
    EndJob(std::to_string(n) + " worker(s) remain, fewer than --min-np " +
           std::to_string(o_.min_np) + ", and no more came within the elastic timeout (" +
           o_.elastic_timeout_text + " s)");
    return;
  }
  if (!forming_) return;

  if (o_.start_timeout_s > 0) {
    for (auto& w : workers_) {
      if (!w->Live() || w->join_pending) continue;
      Clock::time_point from = std::max(forming_since_, w->started);
      if (std::chrono::duration<double>(now - from).count() < o_.start_timeout_s) continue;
      // Its ssh never brought the remote script's start marker: the login
      // to its host hangs, not the worker.
      std::string what =
          w->child.remote && !w->child.remote_started
              ? w->child.who + ": " + LoginNotCompleted(w->host, o_.ssh_port,
                                                        FormatSeconds(o_.start_timeout_s))
              : w->child.who + " did not ask to join epoch " + std::to_string(epoch_ + 1) +
                    " within the start timeout (" + FormatSeconds(o_.start_timeout_s) + " s)";
      Log(what + ": stopping it");
      unrecovered_.push_back({what, 1});
      Drop(*w, "it did not ask to join within the start timeout", true);
    }
  }
  std::vector<Worker*> live;
  bool all_pending = true;
  for (auto& w : workers_) {
    if (!w->Live()) continue;
    live.push_back(w.get());
    all_pending = all_pending && w->join_pending;
  }
  if (!live.empty() && all_pending && static_cast<int>(live.size()) >= o_.min_np) FormEpoch(live);
}

void ElasticJob::FormEpoch(std::vector<Worker*> members) {
  if (epoch_ >= 0 && o_.reset_limit >= 0 && resets_ >= o_.reset_limit) {
    EndJob("the job was reset " + std::to_string(resets_) + " time(s), the --reset-limit");
    return;
  }
  const int64_t e = epoch_ + 1;
  auto host_index = [&](const Worker* w) {
    for (size_t i = 0; i < usable_.size(); ++i) {
      if (usable_[i].host == w->host) return static_cast<int>(i);
    }
    return INT_MAX;
  };
  // The previous epoch's workers in their order, then the new ones by host
  // list order and slot.
  std::stable_sort(members.begin(), members.end(), [&](const Worker* a, const Worker* b) {
    bool pa = a->epoch >= 0 && a->epoch == epoch_, pb = b->epoch >= 0 && b->epoch == epoch_;
    if (pa != pb) return pa;
    if (pa) return a->rank < b->rank;
    int ha = host_index(a), hb = host_index(b);
    if (ha != hb) return ha < hb;
    if (a->slot != b->slot) return a->slot < b->slot;
    return a->serial < b->serial;
  });
  const int size = static_cast<int>(members.size());
  server_->Set("elastic/epoch", ToBytes(std::to_string(e)));
  std::string list;
  for (int r = 0; r < size; ++r) {
    Worker& w = *members[r];
    server_->Set(w.AssignKey(), ToBytes("ok " + std::to_string(e) + " " + std::to_string(r) + " " +
                                        std::to_string(size) + " " + std::to_string(hosts_version_)));
    ++w.joins;
    w.join_pending = false;
    w.epoch = e;
    w.rank = r;
    list += " " + std::to_string(r) + "=" + w.id;
  }
  if (epoch_ >= 0) ++resets_;
  epoch_ = e;
  if (metrics_) metrics_->SetEpoch(e, size);
  forming_ = false;
  below_min_ = false;
  unrecovered_.clear();
  if (o_.verbose) {
    Log("epoch " + std::to_string(e) + " formed: size " + std::to_string(size) + ", hosts_version " +
        std::to_string(hosts_version_) + ":" + list);
  }
}

void ElasticJob::OnExit(Child& c, int wstatus) {
  if (&c == &discovery_) {
    discovery_wstatus_ = wstatus;
    discovery_exited_ = Clock::now();
    return;
  }
  Worker* w = nullptr;
  for (auto& p : workers_) {
    if (&p->child == &c) w = p.get();
  }
  if (w == nullptr) return;
  ExitInfo e = DescribeExit(c, wstatus);
  if (w->epoch >= 0 && w->epoch == epoch_ && server_) {
    // A member of the latest epoch is gone: workers still forming it (in its
    // rendezvous, waiting for this one's keys) give up at once and reset
    // again, rather than wait out the start timeout (docs/elastic.md).
    server_->Set("elastic/failed/" + std::to_string(epoch_),
                 ToBytes(c.who + " (rank " + std::to_string(w->rank) + ") " + e.what));
  }
  if (w->dropped || stopping_ || !e.failed) {
    if (!e.failed && !w->dropped && !stopping_ && !finishing_) {
      finishing_ = true;
      if (o_.verbose) Log(c.who + " " + e.what + ": the job is finishing, no more workers start");
    } else if (o_.verbose) {
      Log(c.who + " " + e.what);
    }
    return;
  }
  std::string how;
  Blacklist(w->host, &how);
  Log(c.who + " " + e.what + "; " + how);
  unrecovered_.push_back({c.who + " " + e.what, e.code});
}

void ElasticJob::OnTurn() {
  PollDiscovery();
  if (stopping_) return;
  if (!server_) {
    if (have_list_) {
      if (!StartStoreFor(listed_)) return;
    } else {
      if (SecondsSince(start_) >= o_.elastic_timeout_s) {
        Log("error: the host discovery script gave no host list within the elastic timeout (" +
            o_.elastic_timeout_text + " s)");
        BeginStop(1);
      }
      return;
    }
  }
  if (Ending()) {
    // No worker is left: the job ends; so does a discovery run.
    if (discovery_.running && !discovery_.stop_requested) StopChild(discovery_, false, 0);
    return;
  }
  UpdateHosts();
  // Hosts added: workers on them, up to --max-np (-np before epoch 0). Below
  // --min-np: workers on free slots, back up to -np.
  if (fill_wanted_) {
    fill_wanted_ = false;
    Fill(epoch_ < 0 ? o_.np : INT_MAX);
  }
  if (LiveCount() < o_.min_np) Fill(o_.np);
  if (!stopping_) Form();
}

int ElasticJob::Run() {
  start_ = Clock::now();
  int rc = InstallSignals();
  if (rc != 0) return rc;
  if (o_.discovery_script.empty()) {
    listed_ = o_.hosts;
    have_list_ = true;
  } else {
    PollDiscovery();  // the first run; the store starts once it has answered
  }
  Loop();
  if (metrics_) metrics_->End(o_.summary);
  rc = Finish();
  if (exit_code_ >= 0) return rc;
  if (!unrecovered_.empty()) {
    std::string list;
    for (const auto& f : unrecovered_) list += (list.empty() ? "" : "; ") + f.what;
    Log("error: the job failed: " + list);
    return unrecovered_.front().code;
  }
  return 0;
}

}  // namespace

int RunElastic(const Options& opts) {
  ElasticJob job(opts);
  return job.Run();
}

}  // namespace hvd::launcher

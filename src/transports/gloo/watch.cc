// The Gloo transport's watch (comm.h, Watch): the abort messages, the
// failed pairs Gloo does not report to a waiting request, silent peers.
#include "comm.h"

namespace hvd_gloo_transport {
namespace {

// How often the watch looks while this rank waits on requests: a failure
// anywhere reaches every rank within about two periods (the rank that sees
// it, then its abort message).
constexpr Millis kWatchPeriod(50);


// Peer j's abort receive: kAborted (a message came; *what is it), kClosed
// (Gloo failed the pair; *what says why) or kNothing. The wait is cut short
// before it starts (abortWaitRecv), so it only looks: it returns at once,
// or throws the pair's failure.
Watch::Found Poll(Watch& w, int j, std::string* what) {
  gloo::transport::UnboundBuffer& ub = *w.in[static_cast<size_t>(j)];
  ub.abortWaitRecv();
  const std::vector<char>& b = w.in_bytes[static_cast<size_t>(j)];
  try {
    (void)ub.waitRecv(kForever);
  } catch (const std::exception& e) {
    // A message that came before the pair failed is the better cause: the
    // peer sent it, then closed (Gloo wrote it in before the failure, under
    // the buffer's lock that waitRecv took).
    if (b.back() != Watch::kMagic) {
      *what = e.what();
      return Watch::kClosed;
    }
  }
  if (b.back() != Watch::kMagic) return Watch::kNothing;
  *what = std::string(b.data(), strnlen(b.data(), b.size() - 1));
  return Watch::kAborted;
}

// One look: an abort message from any peer; a failed pair with a peer this
// rank has requests with (a peer that shut down and closed is no failure of
// work that does not involve it); the loop thread's wait silent for the
// peer timeout. What it finds is recorded and every wait woken.
void Round(Comm& c) {
  Watch& w = *c.watch;
  std::vector<char> involved(static_cast<size_t>(c.size), 0);
  int peer = -1;
  int64_t since = 0;
  {
    std::lock_guard<std::mutex> lock(c.failure.mu);
    if (c.failure.status.load() != HVD_OK || w.found != Watch::kNothing) return;
    for (const Request* r = c.pending.head; r != nullptr; r = r->next) involved[r->peer] = 1;
    peer = w.waiting_peer;
    since = w.since;
  }
  Watch::Found found = Watch::kNothing;
  int who = -1;
  std::string text;
  std::lock_guard<std::mutex> polling(w.poll_mu);
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    std::string what;
    const Watch::Found f = Poll(w, j, &what);
    if (f == Watch::kAborted || (f == Watch::kClosed && involved[j] && found == Watch::kNothing)) {
      found = f;
      who = j;
      text = what;
      if (f == Watch::kAborted) break;  // the first cause, as another rank saw it
    }
  }
  const double peer_s = c.peer_s.load();
  const double silent_s = peer >= 0 ? w.progress.SilentFor(peer, since) : 0;
  if (found == Watch::kNothing && peer >= 0 && peer_s > 0 &&
      silent_s > hvd::kit::StoreProbe::StartAfter(peer_s)) {  // a look at the store
    w.store_probe.Start(c.store);
  }
  if (found == Watch::kNothing && peer >= 0 && peer_s > 0 && silent_s > peer_s) {
    found = Watch::kSilent;
    who = peer;
  }
  if (found == Watch::kNothing) return;
  std::lock_guard<std::mutex> lock(c.failure.mu);
  if (c.failure.status.load() != HVD_OK || w.found != Watch::kNothing) return;
  w.found = found;
  w.found_peer = who;
  w.found_text = text;
  w.flagged.store(true);
  c.WakeLocked();
}

void Run(Comm* c) {
  Watch& w = *c->watch;
  std::unique_lock<std::mutex> lock(w.mu);
  while (!w.stop) {
    w.cv.wait_for(lock, kWatchPeriod);
    if (w.stop) break;
    bool busy = false;
    {
      std::lock_guard<std::mutex> f(c->failure.mu);
      busy = c->pending.head != nullptr;
    }
    if (!busy) continue;
    lock.unlock();
    try {
      Round(*c);
    } catch (...) {
      // A look that failed (out of memory): the next one tries again.
    }
    lock.lock();
  }
}

}  // namespace

// Peer j's abort message, if one came (*text: "<status> <text>"). Any
// thread; it only looks.
bool AbortFrom(const Comm& c, int j, std::string* text) {
  if (!c.watch || j < 0 || j >= c.size || j == c.rank) return false;
  Watch& w = *c.watch;
  std::lock_guard<std::mutex> polling(w.poll_mu);
  std::string what;
  if (Poll(w, j, &what) != Watch::kAborted) return false;
  *text = what;
  return true;
}

// Posts the abort receives, before the set-up's closing handshake: every
// peer's pairs exist (the mesh is complete) and none can have finalized yet,
// since a peer's handshake needs this rank's message, sent after these. Posted
// after the handshake, a peer with nothing to do that finalized at once had
// closed its pair already and the post threw ("Connection closed by peer",
// seen in test_gloo_p2p at 4 ranks under load). Throws what Gloo throws.
void PostWatch(Comm& c) {
  auto w = std::make_unique<Watch>();
  w->progress.Resize(c.size);
  w->in.resize(static_cast<size_t>(c.size));
  w->in_bytes.resize(static_cast<size_t>(c.size));
  for (int j = 0; j < c.size; ++j) {
    if (j == c.rank) continue;
    std::vector<char>& b = w->in_bytes[static_cast<size_t>(j)];
    b.assign(Watch::kBytes, 0);
    w->in[static_cast<size_t>(j)] = c.ctx->createUnboundBuffer(b.data(), b.size());
    w->in[static_cast<size_t>(j)]->recv(j, kControlSlot, 0, b.size());
  }
  c.watch = std::move(w);
}

// Starts the watch's thread (after PostWatch and the handshake). Throws
// what std::thread throws.
void StartWatch(Comm& c) { c.watch->thread = std::thread(Run, &c); }

// Stops the thread; the buffers stay until the connections are gone.
void StopWatch(Comm& c) noexcept {
  if (!c.watch || !c.watch->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(c.watch->mu);
    c.watch->stop = true;
  }
  c.watch->cv.notify_all();
  c.watch->thread.join();
  c.watch->store_probe.Join();  // the store goes with finalize
}

// The loop thread waits on a request with `r`'s peer from now on (nullptr:
// no longer); a completed wait is progress with that peer.
void Waiting(Comm& c, const Request* r) {
  if (!c.watch) return;
  std::lock_guard<std::mutex> lock(c.failure.mu);
  if (r != nullptr) {
    c.watch->waiting_peer = r->peer;
    c.watch->since = hvd::kit::Progress::Now();
  } else {
    if (c.watch->waiting_peer >= 0) c.watch->progress.Moved(c.watch->waiting_peer);
    c.watch->waiting_peer = -1;
  }
}

// Tells every peer why this rank's communicator broke ("<status> <msg>" on
// the control slot), once, before its connections close: a peer whose
// requests wait on other pairs learns it at its watch's next look. Waits
// up to 0.2 s for the messages to be written (not for a peer found silent).
void SendAborts(Comm& c, int status, const std::string& msg) noexcept {
  if (!c.watch || c.closed.load() || c.watch->sent.exchange(true)) return;
  Watch& w = *c.watch;
  try {
    const std::string text = std::to_string(status) + " " + msg;
    w.out.assign(Watch::kBytes, 0);
    std::memcpy(w.out.data(), text.data(), std::min(text.size(), Watch::kBytes - 2));
    w.out.back() = Watch::kMagic;
    // A peer found silent takes no message: its send is not waited for.
    int silent = -1;
    {
      std::lock_guard<std::mutex> lock(c.failure.mu);
      if (w.found == Watch::kSilent) silent = w.found_peer;
    }
    std::vector<gloo::transport::UnboundBuffer*> awaited;
    for (int j = 0; j < c.size; ++j) {
      if (j == c.rank) continue;
      try {
        auto ub = c.ctx->createUnboundBuffer(w.out.data(), w.out.size());
        ub->send(j, kControlSlot, 0, w.out.size());
        if (j != silent) awaited.push_back(ub.get());
        w.sends.push_back(std::move(ub));
      } catch (const std::exception&) {
        // That pair has failed: the peer sees its closing.
      }
    }
    const Clock::time_point deadline = Clock::now() + Millis(200);
    for (auto* ub : awaited) {
      const Millis left(std::max<int64_t>(
          1, std::chrono::duration_cast<Millis>(deadline - Clock::now()).count()));
      try {
        ub->waitSend(left);
      } catch (const std::exception&) {
      }
    }
  } catch (...) {
    // Best effort: the peers still see the connections close.
  }
}

}  // namespace hvd_gloo_transport

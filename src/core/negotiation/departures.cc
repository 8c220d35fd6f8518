// Shutdown is not a failure: a rank that shuts down its context keeps taking
// part in the negotiation (with nothing of its own) until every rank has,
// as MPI_Finalize waits for its peers. Byte 1 of the negotiation is 0 in the
// cycle a rank announces its shutdown; every rank then allgathers who has
// shut down (one byte each) and closes the scopes that cannot complete any
// more: the context itself, and each process set with a departed member.
// Sets of the ranks still running go on; once every rank has shut down, all
// leave the loop in the same cycle. (An elastic job keeps the old rule: a
// rank that leaves ends the epoch for every rank.)
#include "core/context_impl.h"

#include <sstream>

namespace hvd {

namespace {

// "rank 3 (host b)" or "ranks 1 (host a), 3 (host b)".
std::string NameRanks(const std::vector<int>& ranks, const Transport& t) {
  std::ostringstream os;
  os << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) os << ", ";
    os << ranks[i];
    const std::string host = t.host_of(ranks[i]);
    if (!host.empty()) os << " (host " << host << ")";
  }
  return os.str();
}

// "rank 3 (host b) shut down its context", with `verb` before "shut down".
std::string ShutDown(const std::vector<int>& ranks, const Transport& t, const char* verb = "") {
  return NameRanks(ranks, t) + verb +
         (ranks.size() == 1 ? " shut down its context" : " shut down their contexts");
}

}  // namespace

// The shutting-down rank's own operations end with its shutdown: whatever
// reached a controller (the queues were taken this cycle), in the context
// and in each of its sets.
void ContextImpl::FailOwn() {
  for (OpRequest& r : root_->controller->TakeAll()) Finish(*root_, r, shutdown_reason_);
  const Status in_set = Error(shutdown_reason_.code(),
                              "the process set's parent context stopped: " +
                                  shutdown_reason_.message());
  for (const auto& set : sets_) {
    if (!set) continue;
    for (OpRequest& r : set->controller->TakeAll()) Finish(*set, r, in_set);
  }
}

// Closes `sc` (the context, or one of its sets) on this rank: its pending and
// queued operations fail with `why`, later submits too. Every rank closes the
// same scopes in the same cycle, so a closed set's slot is released by all
// its members at once (RunCycle drops it).
void ContextImpl::CloseScope(Scope& sc, const Status& why) {
  std::vector<OpRequest> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sc.closed) return;
    sc.closed = true;
    sc.closed_reason = why;
    queued.swap(sc.queue);
    queued_ -= std::min(queued_, queued.size());
  }
  for (OpRequest& r : sc.controller->TakeAll()) Finish(sc, r, why);
  for (OpRequest& r : queued) Finish(sc, r, why);
}

// After a negotiation in which some rank announced its shutdown (byte 1):
// who has shut down, and what can no longer complete. `announce`: this rank
// announced in it. False: every rank has shut down, or the exchange failed
// (the context stopped).
bool ContextImpl::LearnDepartures(bool announce) {
  departed_.resize(static_cast<size_t>(root_->size), 0);
  if (announce) departed_[static_cast<size_t>(root_->rank)] = 1;
  std::vector<std::vector<uint8_t>> all;
  const Status s =
      root_->plane->AllgatherBytes({departed_[static_cast<size_t>(root_->rank)]}, &all);
  if (!s.ok()) {
    FailEverything(Error(s.code(), "the context can no longer communicate: " +
                                       s.Wrap("learning which ranks shut down").message()));
    return false;
  }
  std::vector<int> gone;
  for (size_t r = 0; r < all.size() && r < departed_.size(); ++r) {
    if (!all[r].empty() && all[r][0] != 0) departed_[r] = 1;
    if (departed_[r]) gone.push_back(static_cast<int>(r));
  }
  if (announce) {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_announced_ = true;
    exit_cv_.notify_all();
  }
  if (gone.size() == departed_.size()) {
    // Every rank has shut down: all leave the loop in this cycle.
    FailEverything(shutdown_reason_);
    return false;
  }
  const std::string who = ShutDown(gone, *transport_);
  CloseScope(*root_, Error(HVD_ERR_ABORTED, who +
                                                "; a collective of the whole context cannot "
                                                "complete (collectives of process sets without " +
                                                (gone.size() == 1 ? "it" : "them") + " can)"));
  for (const auto& set : sets_) {
    if (!set || set->closed) continue;
    std::vector<int> in_set;
    for (int m : set->members) {
      if (departed_[static_cast<size_t>(m)]) in_set.push_back(m);
    }
    if (in_set.empty()) continue;
    CloseScope(*set, Error(HVD_ERR_ABORTED,
                           ShutDown(in_set, *transport_) + ": a collective of process " + set->label + " cannot complete"));
  }
  HVD_LOG(log_, HVD_LOG_DEBUG,
          who << "; " << (departed_.size() - gone.size())
              << " rank(s) still running: this rank keeps negotiating with them");
  return true;
}

// What a failure of the negotiation adds where ranks had shut down: a rank
// that shut down leaves after waiting for the others for the stall shutdown
// time, so the failure may be its leaving.
std::string ContextImpl::DepartureNote() const {
  std::vector<int> gone;
  for (size_t r = 0; r < departed_.size(); ++r) {
    if (departed_[r] && static_cast<int>(r) != root_->rank) gone.push_back(static_cast<int>(r));
  }
  if (gone.empty() || !transport_) return "";
  return " (" + ShutDown(gone, *transport_, " had") +
         ", which waits at most HVD_STALL_SHUTDOWN_TIME for the others to shut down theirs)";
}

}  // namespace hvd

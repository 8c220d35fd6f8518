#include "core/negotiation/controller.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "common/kernels.h"

namespace hvd {

namespace {
constexpr size_t kHeader = Controller::kHeaderBytes;
constexpr int kMaxStallKeysLogged = 20;
constexpr size_t kMaxSpareEntries = 4096;
// A request pending this long makes its rank ask for a stall round (at most
// this often), so a handle that times out can say which ranks are missing.
constexpr double kInspectAfterS = 1.0;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// ['a', 'b', ...] for messages: the first kMaxNamesListed names and a count.
std::string NameList(const std::vector<std::string>& names) {
  constexpr size_t kMaxNamesListed = 8;
  std::string s = "[";
  for (size_t i = 0; i < names.size() && i < kMaxNamesListed; ++i) {
    s += (i ? ", '" : "'") + names[i] + "'";
  }
  if (names.size() > kMaxNamesListed) {
    s += ", ... (" + std::to_string(names.size()) + " in all)";
  }
  return s + "]";
}
}  // namespace

// ---- Controller ----------------------------------------------------------

Controller::Controller(int rank, int size, int cache_capacity, StallConfig stall, Logger* log)
    : rank_(rank),
      size_(size),
      stall_(stall),
      log_(log),
      cache_(cache_capacity),
      slot_entry_(static_cast<size_t>(cache_capacity)),
      slot_has_(static_cast<size_t>(cache_capacity), 0),
      joined_(static_cast<size_t>(size), false),
      ctrl_(kHeader + static_cast<size_t>(cache_capacity)),
      last_stall_warning_(Clock::now()),
      last_inspection_(Clock::now()) {}

void Controller::Add(OpRequest&& req, Clock::time_point now) {
  if (req.type == OpType::kAlltoall && req.splits.empty()) {
    int64_t rows = req.tensors.front().shape.empty() ? 1 : req.tensors.front().shape[0];
    req.splits.assign(static_cast<size_t>(size_), rows / size_);
  }
  std::unique_ptr<Entry> e;
  if (spare_.empty()) {
    e = std::make_unique<Entry>();
  } else {
    e = std::move(spare_.back());
    spare_.pop_back();
    e->state = State::kNew;
    e->slot = -1;
  }
  e->req = std::move(req);
  e->enqueued = now;
  e->pos = pending_.size();
  pending_.push_back(std::move(e));
  by_key_valid_ = false;
}

// Out of pending_ (the last entry takes its place); its key out of by_key_.
std::unique_ptr<Controller::Entry> Controller::Remove(Entry* e) {
  if (by_key_valid_) by_key_.erase(e->key());
  const size_t pos = e->pos;
  std::unique_ptr<Entry> out = std::move(pending_[pos]);
  if (pos + 1 != pending_.size()) {
    pending_[pos] = std::move(pending_.back());
    pending_[pos]->pos = pos;
  }
  pending_.pop_back();
  return out;
}

Controller::Entry* Controller::FindByKey(const std::string& key) {
  if (!by_key_valid_) {
    by_key_.clear();
    for (const auto& e : pending_) by_key_.emplace(e->key(), e.get());
    by_key_valid_ = true;
  }
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : it->second;
}

std::string Controller::RankList(const std::vector<int>& ranks) const {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << "]";
  return os.str();
}

Status Controller::Validate(const std::vector<RequestDesc>& all) const {
  const RequestDesc& a = all[0];
  for (int r = 1; r < size_; ++r) {
    const RequestDesc& b = all[r];
    const char* what = nullptr;
    size_t member = 0;  // the group member a shape mismatch is about
    if (a.type != b.type) {
      what = "operation";
    } else if (a.names != b.names) {
      what = "group members";
    } else if (a.type != OpType::kBarrier && a.type != OpType::kCloseSet && a.dtype != b.dtype) {
      what = "dtype";
    } else if ((a.device == HVD_DEVICE_CPU) != (b.device == HVD_DEVICE_CPU)) {
      what = "device kind";
    } else if ((a.type == OpType::kAllreduce || a.type == OpType::kReducescatter) &&
               (a.reduce_op != b.reduce_op || std::memcmp(&a.prescale, &b.prescale, 8) != 0 ||
                std::memcmp(&a.postscale, &b.postscale, 8) != 0)) {
      what = "reduction op or scale factors";
    } else if (a.type == OpType::kBroadcast && a.root != b.root) {
      what = "root rank";
    } else {
      for (size_t t = 0; t < a.shapes.size() && what == nullptr; ++t) {
        const auto& sa = a.shapes[t];
        const auto& sb = b.shapes[t];
        if (a.type == OpType::kAllgather || a.type == OpType::kAlltoall ||
            a.type == OpType::kProcessSet) {
          if (sa.size() != sb.size() || !std::equal(sa.begin() + (sa.empty() ? 0 : 1), sa.end(),
                                                    sb.begin() + (sb.empty() ? 0 : 1))) {
            what = "shape (all dimensions but the first must agree)";
          }
        } else if (a.type != OpType::kBarrier && a.type != OpType::kCloseSet && sa != sb) {
          what = "shape";
        }
        if (what != nullptr) member = t;
      }
    }
    if (what == nullptr && a.type == OpType::kAlltoall &&
        (a.splits.size() != static_cast<size_t>(size_) ||
         b.splits.size() != static_cast<size_t>(size_))) {
      what = "splits";
    }
    if (what == nullptr) continue;
    const std::string other = "rank " + std::to_string(r);
    if (std::strncmp(what, "shape", 5) == 0 && a.names.size() > 1) {
      // A group member's shape: name that member and both shapes (the
      // group's descriptor shows neither).
      return Error(HVD_ERR_MISMATCH,
                   std::string("ranks disagree on the ") + what + " of '" + a.names[member] +
                       "' (tensor " + std::to_string(member + 1) + " of " +
                       std::to_string(a.names.size()) + " in grouped " + OpTypeName(a.type) +
                       " '" + a.key + "'): rank 0 submitted " + DtypeName(a.dtype) +
                       ShapeString(a.shapes[member]) + ", " + other + " submitted " +
                       DtypeName(b.dtype) + ShapeString(b.shapes[member]));
    }
    if (std::strcmp(what, "group members") == 0) {
      return Error(HVD_ERR_MISMATCH, "ranks disagree on the group members of '" + a.key +
                                         "': rank 0 grouped " + NameList(a.names) + ", " +
                                         other + " grouped " + NameList(b.names));
    }
    return Error(HVD_ERR_MISMATCH, std::string("ranks disagree on the ") + what + " of '" + a.key +
                                       "': rank 0 submitted " + a.Describe() + ", " + other +
                                       " submitted " + b.Describe());
  }
  return Status::Ok();
}

Status Controller::Cycle(ControlPlane* cp, bool shutting_down, Clock::time_point now,
                         std::vector<Response>* out, bool* shutdown) {
  const size_t slots = slot_extent();
  Contribute(shutting_down, now, ctrl_.data(), slots);
  HVD_CHECK(cp->AllreduceMinU8(ctrl_.data(), control_bytes(slots)).Wrap("negotiation"));
  return Conclude(cp, ctrl_.data(), slots, now, out, shutdown);
}

size_t Controller::slot_extent() const {
  const size_t used = static_cast<size_t>(cache_.high_water());
  const size_t rounded = (used + extent_step_ - 1) / extent_step_ * extent_step_;
  return std::min(rounded, static_cast<size_t>(cache_.capacity()));
}

void Controller::Contribute(bool shutting_down, Clock::time_point now, uint8_t* ctrl,
                            size_t slots) {
  ++tick_;
  slots = std::min(slots, static_cast<size_t>(cache_.capacity()));

  // 1. Local state: find cache slots for new requests; drop stale slots.
  bool has_new = false;
  bool want_stall = false;
  bool want_warning = false;
  std::fill(ctrl, ctrl + control_bytes(slots), 0);
  // Only slots below the high water were ever marked.
  std::fill(slot_has_.begin(), slot_has_.begin() + cache_.high_water(), 0);
  for (const auto& entry : pending_) {
    Entry& e = *entry;
    const std::string& key = e.key();
    if (e.state == State::kCached && !cache_.Holds(e.slot, key)) {
      e.state = State::kNew;
      e.slot = -1;
    }
    if (e.state == State::kNew && e.req.type != OpType::kBarrier &&
        e.req.type != OpType::kProcessSet && e.req.type != OpType::kCloseSet) {
      int slot = -1;
      // The slot this name had last time, if it still holds the name and
      // describes the request: no lookup by name in a steady state.
      const uint32_t id = e.req.tensors.front().name_id;
      if (id < slot_hint_.size()) {
        const int hint = slot_hint_[id];
        if (cache_.Holds(hint, key) &&
            DescribesRequest((*cache_.Get(hint))[static_cast<size_t>(rank_)], e.req, true)) {
          slot = hint;
        }
      }
      if (slot < 0) {
        slot = cache_.Lookup(key, e.req, rank_);
        if (slot >= 0 && id != kNoNameId) {
          if (id >= slot_hint_.size()) slot_hint_.resize(static_cast<size_t>(id) + 1, -1);
          slot_hint_[id] = slot;
        }
      }
      if (slot >= 0) {
        e.state = State::kCached;
        e.slot = slot;
      }
    }
    if (e.state == State::kNew) has_new = true;
    if (e.state == State::kCached && static_cast<size_t>(e.slot) < slots) {
      ctrl[kHeader + e.slot] = 1;
      slot_entry_[static_cast<size_t>(e.slot)] = &e;
      slot_has_[static_cast<size_t>(e.slot)] = 1;
    }
    double age = Seconds(now - e.enqueued);
    if (stall_.warning_s > 0 && age >= stall_.warning_s &&
        Seconds(now - last_stall_warning_) >= stall_.warning_s) {
      want_warning = want_stall = true;
    }
    if ((stall_.shutdown_s > 0 && age >= stall_.shutdown_s) ||
        (age >= kInspectAfterS && Seconds(now - last_inspection_) >= kInspectAfterS)) {
      want_stall = true;
    }
  }
  if (joined_[rank_]) {
    // A joined rank takes part in whatever the others are ready for.
    std::fill(ctrl + kHeader, ctrl + control_bytes(slots), 1);
  }
  ctrl[0] = has_new ? 0 : 1;
  ctrl[1] = shutting_down ? 0 : 1;
  ctrl[2] = want_stall ? 0 : 1;
  ctrl[3] = proposal_;
  ctrl[4] = piggyback_ ? 1 : 0;
  want_warning_ = want_warning;
}

Status Controller::Conclude(ControlPlane* cp, const uint8_t* ctrl, size_t slots,
                            Clock::time_point now, std::vector<Response>* out, bool* shutdown) {
  out->clear();
  *shutdown = false;
  const bool want_warning = want_warning_;
  decided_ = ctrl[3];
  piggyback_agreed_ = ctrl[4] != 0;

  if (ctrl[1] == 0) {
    *shutdown = true;
    return Status::Ok();
  }
  RespondCached(ctrl + kHeader, slots, out);
  const bool full = ctrl[0] == 0;
  const bool stall_round = ctrl[2] == 0;
  if (!full && !stall_round) return Status::Ok();
  return FullRound(cp, stall_round, want_warning, now, out);
}

// 2. Requests every rank has in the cache: ready now, in slot order. The
// slot bytes are read a word at a time: most cycles hold a handful of
// ready slots among the cache's capacity (1,024 by default), and this
// scan runs every cycle of every rank.
void Controller::RespondCached(const uint8_t* ready, size_t slots, std::vector<Response>* out) {
  const int capacity = static_cast<int>(std::min(slots, static_cast<size_t>(cache_.capacity())));
  const bool any_joined = std::find(joined_.begin(), joined_.end(), true) != joined_.end();
  for (int s = 0; s < capacity; ++s) {
    if ((s & 7) == 0 && s + 8 <= capacity) {
      uint64_t word;
      std::memcpy(&word, ready + s, sizeof(word));
      if (word == 0) {
        s += 7;
        continue;
      }
    }
    if (ready[s] == 0) continue;
    cache_.Touch(s, tick_);
    Response& r = out->emplace_back();  // built in place: hundreds a step
    r.all = cache_.Get(s);
    r.slot = s;
    if (any_joined) {
      for (int q = 0; q < size_; ++q) {
        if (joined_[q]) r.joined.push_back(q);
      }
    }
    // Leave the entry in pending_ for Take(); mark it so that it is not
    // announced again.
    if (slot_has_[static_cast<size_t>(s)] != 0) slot_entry_[static_cast<size_t>(s)]->state = State::kAnnounced;
  }
}

// 3. Full round: everyone's new descriptors (and, on request, stall reports).
Status Controller::FullRound(ControlPlane* cp, bool stall_round, bool want_warning,
                             Clock::time_point now, std::vector<Response>* out) {
  ++full_rounds_;
  std::vector<RankMessage> msgs;
  HVD_CHECK(Exchange(cp, OwnMessage(stall_round, want_warning, now), &msgs));
  NoteWaitingOn(ApplyAnnouncements(&msgs, out));
  if (stall_round) StallReport(msgs, now, out);
  return Status::Ok();
}

// This rank's part of a full round: its new requests (announced from now
// on) and, in a stall round, every pending key and those that expired.
RankMessage Controller::OwnMessage(bool stall_round, bool want_warning, Clock::time_point now) {
  RankMessage mine;
  for (const auto& entry : pending_) {
    Entry& e = *entry;
    if (e.state == State::kNew) {
      mine.requests.push_back(DescFromRequest(e.req));
      e.state = State::kAnnounced;
    }
  }
  if (stall_round) {
    mine.stall_report = true;
    mine.stall_warning = want_warning;
    for (const auto& e : pending_) {
      mine.pending.push_back(e->key());
      if (stall_.shutdown_s > 0 && Seconds(now - e->enqueued) >= stall_.shutdown_s) {
        mine.expired.push_back(e->key());
      }
    }
    last_inspection_ = now;
  }
  return mine;
}

// Every rank's message, by rank.
Status Controller::Exchange(ControlPlane* cp, const RankMessage& mine,
                            std::vector<RankMessage>* msgs) const {
  ByteWriter w;
  EncodeRankMessage(mine, &w);
  std::vector<std::vector<uint8_t>> all;
  HVD_CHECK(cp->AllgatherBytes(w.bytes(), &all).Wrap("negotiation"));
  msgs->assign(static_cast<size_t>(size_), RankMessage());
  for (int r = 0; r < size_; ++r) {
    HVD_CHECK(DecodeRankMessage(all[r].data(), all[r].size(), &(*msgs)[r])
                  .Wrap("message from rank " + std::to_string(r)));
  }
  return Status::Ok();
}

// 3a. Announcements, in rank order. A full announcement of a cached key
// means that rank's request changed: the slot is dropped everywhere and
// ranks holding it re-announce in full next cycle. Returns the keys
// announced.
std::vector<std::string> Controller::ApplyAnnouncements(std::vector<RankMessage>* msgs,
                                                        std::vector<Response>* out) {
  std::vector<std::string> touched;
  for (int r = 0; r < size_; ++r) {
    for (RequestDesc& d : (*msgs)[r].requests) {
      cache_.Invalidate(d.key);
      const std::string key = d.key;
      touched.push_back(key);
      const bool is_join = d.type == OpType::kJoin;
      TableRow& row = table_[key];
      if (row.descs.empty()) {
        row.descs.resize(static_cast<size_t>(size_));
        row.have.assign(static_cast<size_t>(size_), false);
      }
      if (row.have[r]) continue;  // cannot happen with well-behaved peers
      row.have[r] = true;
      row.descs[r] = std::move(d);
      ++row.count;
      if (is_join && !joined_[r]) {
        joined_[r] = true;
        last_joined_ = r;
        // Rows that waited only for this rank may be complete now (in key
        // order, the same on every rank).
        std::vector<std::string> keys;
        for (const auto& kv : table_) keys.push_back(kv.first);
        for (const std::string& k : keys) TryComplete(k, out);
      } else {
        TryComplete(key, out);
      }
    }
  }
  return touched;
}

// Who this rank's requests still wait for, as far as the table shows (the
// ranks that have not announced them), for a handle's timeout message.
void Controller::NoteWaitingOn(const std::vector<std::string>& touched) {
  for (const std::string& key : touched) {
    auto row = table_.find(key);
    if (row == table_.end() || !row->second.have[rank_]) continue;
    Entry* e = FindByKey(key);
    if (e == nullptr) continue;
    std::vector<int> missing;
    for (int q = 0; q < size_; ++q) {
      if (!row->second.have[q] && !joined_[q]) missing.push_back(q);
    }
    if (!missing.empty()) {
      e->req.handle->SetWaitingOn("ranks " + RankList(missing) + " have not submitted '" + key +
                                  "'");
    }
  }
}

// 3b. Stall report: who is missing what; expire what waited too long.
void Controller::StallReport(const std::vector<RankMessage>& msgs, Clock::time_point now,
                             std::vector<Response>* out) {
  std::map<std::string, std::vector<int>> holders;
  std::set<std::string> expired;
  bool warn = false;
  for (int r = 0; r < size_; ++r) {
    for (const auto& k : msgs[r].pending) holders[k].push_back(r);
    for (const auto& k : msgs[r].expired) expired.insert(k);
    warn = warn || msgs[r].stall_warning;
  }
  if (warn) last_stall_warning_ = now;
  std::ostringstream report;
  int listed = 0;
  std::set<std::string> responded;
  for (const Response& r : *out) responded.insert(r.key());
  for (const auto& [key, ranks] : holders) {
    if (responded.count(key) != 0) continue;
    std::vector<int> missing;
    for (int r = 0, i = 0; r < size_; ++r) {
      if (i < static_cast<int>(ranks.size()) && ranks[i] == r) {
        ++i;
      } else {
        missing.push_back(r);
      }
    }
    if (Entry* e = FindByKey(key)) {
      e->req.handle->SetWaitingOn(
          missing.empty() ? std::string()
                          : "ranks " + RankList(missing) + " have not submitted '" + key + "'");
    }
    if (!missing.empty()) {
      if (listed < kMaxStallKeysLogged) {
        report << "\n  '" << key << "': submitted by ranks " << RankList(ranks)
               << ", missing ranks " << RankList(missing);
      }
      ++listed;
    }
    if (expired.count(key) != 0) out->push_back(Expire(key, ranks, missing));
  }
  if (warn && listed > 0 && rank_ == 0) {
    HVD_LOG(*log_, HVD_LOG_WARNING,
            "stall: " << listed << " operation(s) are waiting on other ranks "
                      "(a rank may have skipped a collective or submitted a different name)"
                      << report.str() << (listed > kMaxStallKeysLogged ? "\n  ..." : ""));
  }
}

// The stall shutdown of `key` (held by `ranks`, not by `missing`): its
// row and slot go, and its error response names who never submitted it.
Response Controller::Expire(const std::string& key, const std::vector<int>& ranks,
                            const std::vector<int>& missing) {
  Response resp;
  resp.own_key = key;
  std::ostringstream msg;
  msg << "'" << key << "' stalled for more than " << stall_.shutdown_s << " s: ";
  if (missing.empty()) {
    msg << "every rank submitted it but negotiation did not complete";
  } else {
    msg << "ranks " << RankList(missing) << " never submitted it (ranks " << RankList(ranks)
        << " did)";
  }
  resp.error = Error(HVD_ERR_TIMEOUT, msg.str());
  table_.erase(key);
  cache_.Invalidate(key);
  return resp;
}

bool Controller::TryComplete(const std::string& key, std::vector<Response>* out) {
  auto it = table_.find(key);
  if (it == table_.end()) return false;
  TableRow& row = it->second;
  int first = -1;
  std::vector<int> absent;
  for (int q = 0; q < size_; ++q) {
    if (row.have[q]) {
      if (first < 0) first = q;
    } else if (joined_[q]) {
      absent.push_back(q);
    } else {
      return false;  // still waiting for a rank that has not joined
    }
  }
  const OpType type = row.descs[first].type;
  if (type == OpType::kJoin && row.count != size_) return false;

  Response resp;
  resp.own_key = key;
  resp.joined = absent;
  if (type == OpType::kJoin) resp.last_joined = last_joined_;
  if (!absent.empty() && type != OpType::kAllreduce) {
    std::vector<int> ranks(absent.begin(), absent.end());
    resp.error = Error(HVD_ERR_UNSUPPORTED,
                       std::string(OpTypeName(type)) + " '" + key + "' cannot run while ranks " +
                           RankList(ranks) + " have joined (only allreduce takes zeros from "
                           "joined ranks)");
  } else {
    for (int q : absent) row.descs[q] = row.descs[first];  // zeros of the same shape
    resp.error = Validate(row.descs);
  }
  if (resp.error.ok()) {
    resp.all = std::make_shared<const std::vector<RequestDesc>>(std::move(row.descs));
    if (type != OpType::kBarrier && type != OpType::kJoin && type != OpType::kProcessSet &&
        type != OpType::kCloseSet && absent.empty()) {
      cache_.Insert(key, resp.all, tick_);
    }
  }
  out->push_back(std::move(resp));
  table_.erase(it);
  if (type == OpType::kJoin) std::fill(joined_.begin(), joined_.end(), false);
  return true;
}

bool Controller::Take(const Response& resp, OpRequest* req) {
  Entry* e = nullptr;
  if (resp.slot >= 0 && static_cast<size_t>(resp.slot) < slot_has_.size() &&
      slot_has_[static_cast<size_t>(resp.slot)] != 0) {
    e = slot_entry_[static_cast<size_t>(resp.slot)];
    slot_has_[static_cast<size_t>(resp.slot)] = 0;
  } else {
    e = FindByKey(resp.key());
  }
  if (e == nullptr) return false;
  std::unique_ptr<Entry> taken = Remove(e);
  *req = std::move(taken->req);
  if (spare_.size() < kMaxSpareEntries) spare_.push_back(std::move(taken));
  return true;
}

std::vector<OpRequest> Controller::TakeAll() {
  std::vector<OpRequest> v;
  for (auto& e : pending_) v.push_back(std::move(e->req));
  pending_.clear();
  by_key_.clear();
  by_key_valid_ = false;
  table_.clear();
  // Only slots below the high water were ever marked.
  std::fill(slot_has_.begin(), slot_has_.begin() + cache_.high_water(), 0);
  return v;
}

}  // namespace hvd

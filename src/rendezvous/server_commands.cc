// The rendezvous store's commands (Ping, Set, Get, Add, Check) on the
// server's key-value table, and the Gets waiting for a key. The encoding of
// each request and reply is in frame.h.

#include "rendezvous/server.h"

namespace hvd::rdv::detail {

namespace {

ServerImpl::Outcome Failed(Writer* out, hvd_status_t code, const std::string& msg) {
  out->U8(kFailed);
  out->U32(static_cast<uint32_t>(static_cast<int32_t>(code)));
  out->Str(msg);
  return ServerImpl::Outcome::kReply;
}

// A Get's answer: the value, or an error where it cannot fit in a frame.
void ValueReply(const std::string& key, const Bytes& value, Writer* out) {
  if (value.size() > kMaxFrame - 5) {
    Failed(out, HVD_ERR_INVALID_ARGUMENT, "the value of key " + ShowKey(key) + " (" +
                                              std::to_string(value.size()) +
                                              " bytes) does not fit in a store frame");
    return;
  }
  out->U8(kOk);
  out->Blob(value.data(), value.size());
}

}  // namespace

ServerImpl::Outcome ServerImpl::Handle(Conn* c, const uint8_t* p, size_t n, Writer* out) {
  Reader in(p, n);
  uint8_t cmd = 0;
  if (!in.U8(&cmd)) return Outcome::kMalformed;
  switch (cmd) {
    case kPing: return HandlePing(&in, out);
    case kSet: return HandleSet(&in, out);
    case kGet: return HandleGet(c, &in, out);
    case kAdd: return HandleAdd(&in, out);
    case kCheck: return HandleCheck(&in, out);
    default: return Outcome::kMalformed;
  }
}

ServerImpl::Outcome ServerImpl::HandlePing(Reader* in, Writer* out) {
  uint32_t version = 0;
  if (!in->U32(&version) || !in->AtEnd()) return Outcome::kMalformed;
  if (version != kProtocolVersion) {
    return Failed(out, HVD_ERR_VERSION, "rendezvous protocol version " + std::to_string(version) +
                                            " is not supported by this store (it speaks " +
                                            std::to_string(kProtocolVersion) + ")");
  }
  out->U8(kOk);
  out->U32(kProtocolVersion);
  return Outcome::kReply;
}

ServerImpl::Outcome ServerImpl::HandleSet(Reader* in, Writer* out) {
  std::string key;
  Bytes value;
  if (!in->Str(&key) || !in->Blob(&value) || !in->AtEnd()) return Outcome::kMalformed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = std::move(value);
  }
  // Waiters are answered before the setter hears back, so a Set that has
  // returned has also released every Get waiting for its key.
  ServeWaiters(key);
  out->U8(kOk);
  return Outcome::kReply;
}

ServerImpl::Outcome ServerImpl::HandleGet(Conn* c, Reader* in, Writer* out) {
  std::string key;
  uint64_t wait_ms = 0;
  if (!in->Str(&key) || !in->U64(&wait_ms) || !in->AtEnd()) return Outcome::kMalformed;
  const TimePoint deadline = DeadlineAfterMs(wait_ms);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it != kv_.end()) {
      ValueReply(key, it->second, out);
      return Outcome::kReply;
    }
  }
  if (wait_ms == 0) {
    out->U8(kTimedOut);
    return Outcome::kReply;
  }
  c->waiting = true;
  c->wait_key = std::move(key);
  c->wait_deadline = deadline;
  return Outcome::kWait;
}

ServerImpl::Outcome ServerImpl::HandleAdd(Reader* in, Writer* out) {
  std::string key;
  uint64_t delta = 0;
  if (!in->Str(&key) || !in->U64(&delta) || !in->AtEnd()) return Outcome::kMalformed;
  uint64_t now_value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it == kv_.end()) {
      it = kv_.emplace(key, Bytes(8, 0)).first;
    } else if (it->second.size() != 8) {
      return Failed(out, HVD_ERR_INVALID_ARGUMENT, "key " + ShowKey(it->first) + " holds " +
                                                       std::to_string(it->second.size()) +
                                                       " bytes, not a 64-bit counter");
    }
    now_value = GetU64(it->second.data()) + delta;  // wraps, as documented
    PutU64(it->second.data(), now_value);
  }
  ServeWaiters(key);
  out->U8(kOk);
  out->U64(now_value);
  return Outcome::kReply;
}

ServerImpl::Outcome ServerImpl::HandleCheck(Reader* in, Writer* out) {
  uint32_t count = 0;
  if (!in->U32(&count) || count > in->remaining() / 4) return Outcome::kMalformed;
  std::vector<std::string> keys(count);
  for (auto& key : keys) {
    if (!in->Str(&key)) return Outcome::kMalformed;
  }
  if (!in->AtEnd()) return Outcome::kMalformed;
  std::lock_guard<std::mutex> lock(mu_);
  out->U8(kOk);
  out->U32(count);
  for (const auto& key : keys) out->U8(kv_.count(key) ? 1 : 0);
  return Outcome::kReply;
}

void ServerImpl::ServeWaiters(const std::string& key) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  std::unordered_set<uint64_t> ids = std::move(w->second);
  waiters_.erase(w);
  Bytes value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it == kv_.end()) return;  // cannot happen: keys are never deleted
    value = it->second;
  }
  for (uint64_t id : ids) {
    Conn* c = Find(id);
    if (c == nullptr || !c->waiting || c->wait_key != key) continue;
    c->waiting = false;
    c->wait_key.clear();
    Writer reply(5 + value.size());
    ValueReply(key, value, &reply);
    Reply(c, &reply);
  }
}

}  // namespace hvd::rdv::detail

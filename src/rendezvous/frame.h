// The rendezvous store's wire format: frames (HMAC-SHA256 over a sequence
// number and the payload) and the payload encoding of requests and replies.
//
// Frames (see store.h):  u32 length (BE) | payload | HMAC-SHA256(key, seq || payload)
//
// Sequence numbers are u64, big endian in the MAC input, counted per
// connection and per direction from zero. The server-to-client direction has
// the top bit set (kServerToClient), so a reply can never be reflected back
// to the server as a request.
//
// Payload encoding (all integers big endian; str/blob = u32 length | bytes):
//
//   request                        reply when the status byte is kOk
//   kPing  u32 version             u32 version
//   kSet   str key | blob value    (nothing)
//   kGet   str key | u64 wait_ms   blob value        (or kTimedOut, nothing)
//   kAdd   str key | u64 delta     u64 new value     (two's complement)
//   kCheck u32 n | n x str key     u32 n | n x u8 (1 = present)
//
// Every reply starts with a status byte: kOk, kTimedOut (Get only),
// kFailed (then i32 hvd_status_t | str message), or kShuttingDown. A request
// must be consumed exactly: a short, long or unknown one is malformed, and the
// server drops the connection as it does for a bad MAC. So is a request sent
// before the reply to the previous one.
//
// kBusy (nothing after it) is the server's first frame, in place of any
// reply, to a connection it drops before that connection authenticated (too
// many waiting to, or too slow): a client that holds the secret connects
// again.
//
// Counters are stored as 8-byte big-endian values, so Get on a counter key
// returns those 8 bytes; Add wraps around on overflow.
//
// Known limit: sequence numbers start at zero on every connection, so a
// recorded first frame could be replayed on a new connection by someone who
// can sniff the job's traffic (it cannot be altered or reordered). The secret
// keeps out everyone else.

#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "rendezvous/socket.h"
#include "rendezvous/store.h"

namespace hvd::rdv::detail {

constexpr size_t kLenBytes = 4;
constexpr size_t kSeqBytes = 8;
constexpr size_t kMacBytes = 32;
constexpr uint64_t kServerToClient = uint64_t{1} << 63;
constexpr uint32_t kProtocolVersion = 1;

// Bytes the payload buffer grows by while a frame arrives: memory follows the
// bytes actually received, not the length a peer announces.
constexpr size_t kReadChunk = 64 << 10;

enum Command : uint8_t { kPing = 1, kSet = 2, kGet = 3, kAdd = 4, kCheck = 5 };
enum ReplyStatus : uint8_t { kOk = 0, kTimedOut = 1, kFailed = 2, kShuttingDown = 3, kBusy = 4 };

inline void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}
inline void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}
inline uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | p[i];
  return v;
}
inline uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// The secret never appears in messages.
Status DecodeSecret(const std::string& secret, Bytes* key);
bool ComputeMac(const Bytes& key, const uint8_t* data, size_t n, uint8_t out[kMacBytes]);
// A key as it appears in messages: printable, and not too long.
std::string ShowKey(const std::string& key);

enum class FrameCode {
  kOk,
  kClosed,     // orderly close before a frame started
  kTruncated,  // the peer closed inside a frame
  kTooLong,    // announced length over kMaxFrame
  kBadMac,     // authentication failed (wrong secret, tampering, replay, reorder)
  kTimeout,
  kIoError,
  kInternal,   // HMAC computation failed
};
struct FrameResult {
  FrameCode code = FrameCode::kOk;
  int err = 0;
  uint64_t length = 0;
};

// Where a sealed frame starts in its buffer (see SealFrame).
constexpr size_t kFrameStart = kSeqBytes - kLenBytes;
// Seals buf (kSeqBytes of room, then the payload, as a Writer makes it) into
// a frame in place: seq and the length go into the room, the MAC after the
// payload; the frame is buf[kFrameStart..]. False if the MAC fails.
bool SealFrame(const Bytes& key, uint64_t seq, Bytes* buf);
FrameResult FromIo(const Io& io, bool started);
// buf holds kSeqBytes of room followed by the payload. The sequence number is
// written into that room, so the MAC input (seq || payload) is contiguous.
FrameResult SendFrame(int fd, const Bytes& key, uint64_t seq, Bytes* buf, const Limits& lim);
// On success *buf holds seq || payload (the payload starts at kSeqBytes).
FrameResult ReadFrame(int fd, const Bytes& key, uint64_t seq, const Limits& lim, Bytes* buf);

// ---- payload encoding -----------------------------------------------------------

class Writer {
 public:
  explicit Writer(size_t payload_hint = 64) {
    b_.reserve(kSeqBytes + payload_hint);
    b_.resize(kSeqBytes);
  }
  void U8(uint8_t v) { b_.push_back(v); }
  void U32(uint32_t v) {
    size_t at = b_.size();
    b_.resize(at + 4);
    PutU32(b_.data() + at, v);
  }
  void U64(uint64_t v) {
    size_t at = b_.size();
    b_.resize(at + 8);
    PutU64(b_.data() + at, v);
  }
  // Callers keep n within kMaxFrame.
  void Blob(const uint8_t* p, size_t n) {
    U32(static_cast<uint32_t>(n));
    b_.insert(b_.end(), p, p + n);
  }
  void Str(const std::string& s) { Blob(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  Bytes* buffer() { return &b_; }

 private:
  Bytes b_;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  size_t remaining() const { return n_; }
  bool AtEnd() const { return n_ == 0; }
  bool U8(uint8_t* v) {
    if (n_ < 1) return false;
    *v = *p_;
    Skip(1);
    return true;
  }
  bool U32(uint32_t* v) {
    if (n_ < 4) return false;
    *v = GetU32(p_);
    Skip(4);
    return true;
  }
  bool U64(uint64_t* v) {
    if (n_ < 8) return false;
    *v = GetU64(p_);
    Skip(8);
    return true;
  }
  bool Blob(Bytes* out) {
    const uint8_t* p;
    size_t n;
    if (!Field(&p, &n)) return false;
    out->assign(p, p + n);
    return true;
  }
  bool Str(std::string* out) {
    const uint8_t* p;
    size_t n;
    if (!Field(&p, &n)) return false;
    out->assign(reinterpret_cast<const char*>(p), n);
    return true;
  }

 private:
  bool Field(const uint8_t** p, size_t* n) {
    uint32_t len;
    if (!U32(&len) || len > n_) return false;
    *p = p_;
    *n = len;
    Skip(len);
    return true;
  }
  void Skip(size_t k) {
    p_ += k;
    n_ -= k;
  }
  const uint8_t* p_;
  size_t n_;
};

}  // namespace hvd::rdv::detail

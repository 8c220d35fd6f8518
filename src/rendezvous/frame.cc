// The rendezvous store's frames: the secret, the MAC, sending and reading
// one frame with a deadline.

#include "rendezvous/frame.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>

namespace hvd::rdv {
namespace detail {

std::string ShowKey(const std::string& key) {
  constexpr size_t kMax = 128;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kMax; ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (key.size() > kMax) out += "...";
  return out + "'";
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Status DecodeSecret(const std::string& secret, Bytes* key) {
  if (secret.empty() || secret.size() % 2 != 0) {
    return InvalidArgument("the rendezvous secret must be a non-empty hex string of even length (got " +
                           std::to_string(secret.size()) + " characters)");
  }
  key->resize(secret.size() / 2);
  for (size_t i = 0; i < key->size(); ++i) {
    int hi = HexValue(secret[2 * i]);
    int lo = HexValue(secret[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgument("the rendezvous secret must be a hex string (character " +
                             std::to_string(hi < 0 ? 2 * i : 2 * i + 1) + " is not a hex digit)");
    }
    (*key)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return Status::Ok();
}

bool ComputeMac(const Bytes& key, const uint8_t* data, size_t n, uint8_t out[kMacBytes]) {
  unsigned int len = 0;
  return HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), data, n, out, &len) != nullptr &&
         len == kMacBytes;
}

bool SealFrame(const Bytes& key, uint64_t seq, Bytes* buf) {
  const size_t len = buf->size() - kSeqBytes;
  PutU64(buf->data(), seq);
  uint8_t mac[kMacBytes];
  if (!ComputeMac(key, buf->data(), buf->size(), mac)) return false;
  PutU32(buf->data() + kFrameStart, static_cast<uint32_t>(len));
  buf->insert(buf->end(), mac, mac + kMacBytes);
  return true;
}

FrameResult FromIo(const Io& io, bool started) {
  switch (io.code) {
    case IoCode::kOk: return {};
    case IoCode::kEof: return {started ? FrameCode::kTruncated : FrameCode::kClosed, 0};
    case IoCode::kTimeout: return {FrameCode::kTimeout, 0};
    case IoCode::kError: break;
  }
  return {FrameCode::kIoError, io.err};
}

FrameResult SendFrame(int fd, const Bytes& key, uint64_t seq, Bytes* buf, const Limits& lim) {
  size_t len = buf->size() - kSeqBytes;
  if (len > kMaxFrame) return {FrameCode::kTooLong, 0, len};
  PutU64(buf->data(), seq);
  uint8_t mac[kMacBytes];
  if (!ComputeMac(key, buf->data(), buf->size(), mac)) return {FrameCode::kInternal, 0};
  uint8_t header[kLenBytes];
  PutU32(header, static_cast<uint32_t>(len));
  iovec iov[3] = {{header, kLenBytes}, {buf->data() + kSeqBytes, len}, {mac, kMacBytes}};
  return FromIo(SendAll(fd, iov, 3, lim), true);
}

FrameResult ReadFrame(int fd, const Bytes& key, uint64_t seq, const Limits& lim, Bytes* buf) {
  uint8_t header[kLenBytes];
  size_t got = 0;
  Io io = RecvExact(fd, header, kLenBytes, lim, &got);
  if (io.code != IoCode::kOk) return FromIo(io, got > 0);
  const uint32_t len = GetU32(header);
  // Checked before any allocation; the buffer then grows only as bytes arrive.
  if (len > kMaxFrame) return {FrameCode::kTooLong, 0, len};
  const size_t want = kSeqBytes + len;
  buf->clear();
  buf->resize(kSeqBytes);
  PutU64(buf->data(), seq);
  while (buf->size() < want) {
    size_t have = buf->size();
    size_t next = std::min(want, std::max(have + kReadChunk, have * 2));
    buf->resize(next);
    io = RecvExact(fd, buf->data() + have, next - have, lim);
    if (io.code != IoCode::kOk) return FromIo(io, true);
  }
  uint8_t mac[kMacBytes];
  io = RecvExact(fd, mac, kMacBytes, lim);
  if (io.code != IoCode::kOk) return FromIo(io, true);
  uint8_t expect[kMacBytes];
  if (!ComputeMac(key, buf->data(), buf->size(), expect)) return {FrameCode::kInternal, 0};
  if (CRYPTO_memcmp(mac, expect, kMacBytes) != 0) return {FrameCode::kBadMac, 0, len};
  return {FrameCode::kOk, 0, len};
}

}  // namespace detail

std::string NewSecret() {
  uint8_t raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return "";  // Start/Connect reject "" clearly
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * sizeof(raw));
  for (uint8_t b : raw) {
    out += kHex[b >> 4];
    out += kHex[b & 0xf];
  }
  OPENSSL_cleanse(raw, sizeof(raw));
  return out;
}

}  // namespace hvd::rdv

// The rendezvous key-value store: a small TCP server (hosted by hvdrun, or by
// rank 0 when there is no launcher) and a client in every rank.
//
// Wire format: every message is a frame
//     u32 length (big endian) | payload (length bytes) | 32-byte HMAC-SHA256
// where the HMAC is keyed with the job secret and covers a per-connection,
// per-direction sequence number followed by the payload, so a frame cannot be
// forged, altered or replayed without the secret. Frames longer than
// kMaxFrame are rejected and the connection closed. A server never crashes or
// stalls on malformed input: it drops that connection and serves the others.
// A connection's first frame is at most 64 KiB and must arrive within the
// authentication timeout (StoreServerOptions).
//
// Sequence numbers count from 0 on each connection; in the server-to-client
// direction the top bit is set, so a reply cannot be reflected back as a
// request. The payload encoding (commands, replies) is documented at the top
// of frame.h. Every client wait is bounded; a client is thread-safe but
// serves one request at a time (a blocking Get holds its connection), and
// sends a request only after the reply to the previous one.
//
// The server is one thread however many clients wait: a blocking Get is a
// pending request, answered when its key is set or its wait ends, and
// forgotten as soon as its client disconnects.
//
// The implementation: frame.h (wire format), socket.h, address.h, server.h
// (server.cc, server_commands.cc) and client.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace hvd::rdv {

using Bytes = std::vector<uint8_t>;

constexpr size_t kMaxFrame = 64u << 20;  // 64 MiB

// A fresh random secret, hex encoded (64 hex chars = 32 bytes). Returns ""
// if the system's random generator fails; Start and Connect reject "".
std::string NewSecret();

// Limits on connections: a client that holds the secret always gets in,
// however many connections others open without it.
struct StoreServerOptions {
  // A connection must deliver its first frame, authenticated, within this
  // many seconds of being accepted, or it is dropped. Clients send that frame
  // right after connecting.
  double auth_timeout_s = 5.0;
  // Connections still to authenticate, at most. When one more arrives the
  // oldest of them is dropped (with a frame, authenticated, telling a client
  // that holds the secret to reconnect, which StoreClient::Connect does).
  size_t max_unauthenticated = 128;
  // Authenticated connections, at most; one more is refused with an error.
  size_t max_connections = 4096;
};

class StoreServer {
 public:
  // Binds host:port (port 0 = any free port; host "" or "0.0.0.0" = all
  // interfaces) and serves from one background thread until destroyed.
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& host, int port,
                                                    const std::string& secret);
  static Result<std::unique_ptr<StoreServer>> Start(const std::string& host, int port,
                                                    const std::string& secret,
                                                    const StoreServerOptions& options);
  virtual ~StoreServer() = default;
  virtual int port() const = 0;
  // Number of connections dropped for bad authentication or malformed frames,
  // or before authenticating (too slow, or the oldest when too many wait).
  virtual uint64_t rejected() const = 0;
  // Direct access for the hosting process (hvdrun's own bookkeeping).
  virtual void Set(const std::string& key, const Bytes& value) = 0;
  virtual bool TryGet(const std::string& key, Bytes* value) const = 0;
};

class StoreClient {
 public:
  // Connects to host:port, retrying until timeout_s (the server may start
  // after the client). The secret must match the server's.
  static Result<std::unique_ptr<StoreClient>> Connect(const std::string& host, int port,
                                                      const std::string& secret,
                                                      double timeout_s);
  virtual ~StoreClient() = default;

  virtual Status Set(const std::string& key, const Bytes& value) = 0;
  // Blocks until the key exists or timeout_s passes (HVD_ERR_TIMEOUT naming the key).
  virtual Result<Bytes> Get(const std::string& key, double timeout_s) = 0;
  // Atomically adds delta to a 64-bit counter (missing = 0); returns the new value.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Which of keys exist now (no waiting).
  virtual Result<std::vector<bool>> Check(const std::vector<std::string>& keys) = 0;
  // The local address of this client's connection: an address of this host
  // that the server (and so, usually, the other ranks) can reach.
  virtual std::string local_address() const = 0;
  // Ends a call blocked on another thread (it fails with an I/O error), and
  // every later call. Safe from any thread while the client lives.
  virtual void Interrupt() = 0;
};

namespace internal {
// True when a connected TCP socket's local and peer addresses are the same
// (a client that raced a server's bind on a port of the ephemeral range).
bool ConnectedToItself(int fd);
}  // namespace internal

// The address a store should listen on to serve `host` only: the first
// numeric address `host` resolves to that belongs to this machine (binding
// to it succeeds). Loopback addresses count only when allow_loopback.
// Returns "" when there is none, with *why saying why.
std::string OwnAddressOf(const std::string& host, bool allow_loopback, std::string* why);

// Parses "host:port" (host may be a bracketed IPv6 literal).
Status ParseHostPort(const std::string& s, std::string* host, int* port);

}  // namespace hvd::rdv

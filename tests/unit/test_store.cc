// Tests of the rendezvous key-value store (src/rendezvous/store.h).
//
// The raw-socket tests speak the wire format with their own small encoder,
// written from the format documented in store.h / frame.h, so they also
// check that the implementation follows that documentation.

#include "rendezvous/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using hvd::Status;
using hvd::rdv::Bytes;
using hvd::rdv::NewSecret;
using hvd::rdv::ParseHostPort;
using hvd::rdv::StoreClient;
using hvd::rdv::StoreServer;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  Bytes out(n);
  for (auto& b : out) b = static_cast<uint8_t>(gen());
  return out;
}

Bytes BigEndian64(uint64_t v) {
  Bytes out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
  return out;
}

// A port nothing listens on (bound, read, released).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Threads of this process now (the entries of /proc/self/task).
int CountThreads() {
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// Waits up to limit_s for the thread count to come down to `want`; returns the last count.
int WaitForThreads(int want, double limit_s) {
  const auto t0 = Clock::now();
  int n = CountThreads();
  while (n != want && SecondsSince(t0) < limit_s) {
    std::this_thread::sleep_for(20ms);
    n = CountThreads();
  }
  return n;
}

// Raises the soft descriptor limit to at least n (up to the hard limit).
bool RaiseFdLimit(rlim_t n) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  if (rl.rlim_cur >= n) return true;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < n) return false;
  rl.rlim_cur = n;
  return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

// A TCP connection to 127.0.0.1:port that never sends a byte; -1 on failure.
// The connect itself is bounded (SO_SNDTIMEO).
int IdleConnection(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// ---- a raw client: plain blocking socket with receive/send timeouts -----------

class RawSocket {
 public:
  explicit RawSocket(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawSocket() { close(fd_); }
  bool connected() const { return connected_; }

  bool Send(const Bytes& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  bool RecvExact(uint8_t* buf, size_t n) {
    size_t off = 0;
    while (off < n) {
      ssize_t r = recv(fd_, buf + off, n - off, 0);
      if (r <= 0) return false;
      off += static_cast<size_t>(r);
    }
    return true;
  }
  // True if the peer closes (EOF or reset) within the 5 s receive timeout.
  bool WaitClosed() {
    uint8_t buf[4096];
    for (;;) {
      ssize_t r = recv(fd_, buf, sizeof(buf), 0);
      if (r == 0) return true;
      if (r < 0) return errno == ECONNRESET;  // EAGAIN: timed out, still open
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// The documented wire format, written independently of src/rendezvous/.
constexpr uint64_t kServerToClient = uint64_t{1} << 63;

Bytes DecodeHex(const std::string& hex) {
  Bytes out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

Bytes Mac(const Bytes& key, uint64_t seq, const Bytes& payload) {
  Bytes input = BigEndian64(seq);
  input.insert(input.end(), payload.begin(), payload.end());
  Bytes mac(32);
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), input.data(), input.size(), mac.data(), &len);
  return mac;
}

Bytes Frame(const Bytes& key, uint64_t seq, const Bytes& payload) {
  Bytes out(4);
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) out[i] = static_cast<uint8_t>(n >> (24 - 8 * i));
  out.insert(out.end(), payload.begin(), payload.end());
  Bytes mac = Mac(key, seq, payload);
  out.insert(out.end(), mac.begin(), mac.end());
  return out;
}

void PutField(Bytes* out, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(n >> (24 - 8 * i)));
  out->insert(out->end(), s.begin(), s.end());
}

Bytes GetPayload(const std::string& key, uint64_t wait_ms) {
  Bytes p = {3};  // kGet
  PutField(&p, key);
  Bytes w = BigEndian64(wait_ms);
  p.insert(p.end(), w.begin(), w.end());
  return p;
}

Bytes AddPayload(const std::string& key, int64_t delta) {
  Bytes p = {4};  // kAdd
  PutField(&p, key);
  Bytes d = BigEndian64(static_cast<uint64_t>(delta));
  p.insert(p.end(), d.begin(), d.end());
  return p;
}

// Reads one reply frame and checks its MAC; returns the payload (empty on failure).
Bytes ReadReply(RawSocket* s, const Bytes& key, uint64_t seq) {
  uint8_t hdr[4];
  if (!s->RecvExact(hdr, 4)) return {};
  uint32_t n = (uint32_t{hdr[0]} << 24) | (uint32_t{hdr[1]} << 16) | (uint32_t{hdr[2]} << 8) | hdr[3];
  if (n > 1024) return {};
  Bytes payload(n), mac(32);
  if (!s->RecvExact(payload.data(), n) || !s->RecvExact(mac.data(), 32)) return {};
  if (mac != Mac(key, seq, payload)) return {};
  return payload;
}

// ---- fixture --------------------------------------------------------------------

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    secret_ = NewSecret();
    auto s = StoreServer::Start("127.0.0.1", 0, secret_);
    ASSERT_TRUE(s.ok()) << s.status().message();
    server_ = std::move(s).value();
    ASSERT_GT(server_->port(), 0);
  }

  std::unique_ptr<StoreClient> Connect(double timeout_s = 5.0) {
    auto c = StoreClient::Connect("127.0.0.1", server_->port(), secret_, timeout_s);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // A good client still works (used after every abuse).
  void ExpectServing(const std::string& tag) {
    auto c = Connect();
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->Set("alive/" + tag, B(tag)).ok());
    auto v = c->Get("alive/" + tag, 1.0);
    ASSERT_TRUE(v.ok()) << v.status().message();
    EXPECT_EQ(*v, B(tag));
  }

  std::string secret_;
  std::unique_ptr<StoreServer> server_;
};

// ---- secrets and addresses ------------------------------------------------------------

TEST(StoreSecret, NewSecretIs64HexCharsAndFresh) {
  std::string a = NewSecret(), b = NewSecret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); }));
  EXPECT_NE(a, b);
}

TEST(StoreSecret, MalformedSecretsAreInvalidArguments) {
  for (const std::string& bad : {std::string(""), std::string("abc"), std::string("zz"),
                                 std::string("0g"), std::string("12 4")}) {
    auto s = StoreServer::Start("127.0.0.1", 0, bad);
    ASSERT_FALSE(s.ok()) << "secret '" << bad << "'";
    EXPECT_EQ(s.status().code(), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_NE(s.status().message().find("hex"), std::string::npos) << s.status().message();
    auto t0 = Clock::now();
    auto c = StoreClient::Connect("127.0.0.1", 1, bad, 5.0);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), HVD_ERR_INVALID_ARGUMENT);
    EXPECT_LT(SecondsSince(t0), 1.0);  // rejected before any connect attempt
  }
  // Upper-case hex is hex.
  auto s = StoreServer::Start("127.0.0.1", 0, "ABCDEF0123");
  EXPECT_TRUE(s.ok()) << s.status().message();
}

TEST(StoreAddress, ParseHostPort) {
  std::string host;
  int port = -1;
  ASSERT_TRUE(ParseHostPort("localhost:29500", &host, &port).ok());
  EXPECT_EQ(host, "localhost");
  EXPECT_EQ(port, 29500);
  ASSERT_TRUE(ParseHostPort("10.1.2.3:0", &host, &port).ok());
  EXPECT_EQ(host, "10.1.2.3");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(ParseHostPort("[::1]:65535", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);
  ASSERT_TRUE(ParseHostPort("[fe80::1%eth0]:80", &host, &port).ok());
  EXPECT_EQ(host, "fe80::1%eth0");

  for (const char* bad : {"localhost", "localhost:", ":80", "host:abc", "host:70000", "host:-1", "host:+1",
                          "host: 80", "host:80x", "host:123456", "::1:80", "[::1]", "[::1]80", "[]:80",
                          "[::1:80", ""}) {
    host = "unchanged";
    port = -7;
    Status s = ParseHostPort(bad, &host, &port);
    EXPECT_FALSE(s.ok()) << "'" << bad << "' parsed as " << host << " " << port;
    EXPECT_EQ(s.code(), HVD_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_EQ(host, "unchanged") << bad;
    EXPECT_EQ(port, -7) << bad;
  }
}

// ---- the commands ---------------------------------------------------------------------------

TEST_F(StoreTest, SetGetRoundTrip) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->local_address(), "127.0.0.1");

  ASSERT_TRUE(c->Set("a", B("hello")).ok());
  auto v = c->Get("a", 1.0);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, B("hello"));

  // Empty value, and an overwrite.
  ASSERT_TRUE(c->Set("empty", Bytes()).ok());
  v = c->Get("empty", 0.0);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(v->empty());
  ASSERT_TRUE(c->Set("a", B("world")).ok());
  v = c->Get("a", 0.0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, B("world"));

  // 1 MiB of random bytes, read back by another client.
  const Bytes big = RandomBytes(1 << 20, 42);
  ASSERT_TRUE(c->Set("big", big).ok());
  auto c2 = Connect();
  ASSERT_NE(c2, nullptr);
  v = c2->Get("big", 1.0);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_TRUE(*v == big);

  // Binary keys are fine, and distinct from their prefixes.
  const std::string bin("k\0ey", 4);
  ASSERT_TRUE(c->Set(bin, B("bin")).ok());
  v = c->Get(bin, 0.0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, B("bin"));
  EXPECT_EQ(c->Get("k", 0.0).status().code(), HVD_ERR_TIMEOUT);

  // The hosting process sees the same data, both ways.
  Bytes seen;
  ASSERT_TRUE(server_->TryGet("a", &seen));
  EXPECT_EQ(seen, B("world"));
  EXPECT_FALSE(server_->TryGet("nope", &seen));
  server_->Set("from-server", B("x"));
  v = c->Get("from-server", 0.0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, B("x"));
}

TEST_F(StoreTest, OversizedSetIsRefusedWithoutSending) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  Status s = c->Set("huge", Bytes(hvd::rdv::kMaxFrame));
  EXPECT_EQ(s.code(), HVD_ERR_INVALID_ARGUMENT) << s.message();
  // The connection is still good.
  EXPECT_TRUE(c->Set("small", B("1")).ok());
  EXPECT_EQ(server_->rejected(), 0u);
}

TEST_F(StoreTest, GetBlocksUntilAnotherClientSets) {
  auto waiter = Connect();
  auto setter = Connect();
  ASSERT_NE(waiter, nullptr);
  ASSERT_NE(setter, nullptr);

  std::atomic<bool> returned{false};
  hvd::Result<Bytes> got = hvd::Error(HVD_ERR_INTERNAL, "not run");
  std::thread t([&] {
    got = waiter->Get("late", 10.0);
    returned = true;
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(returned.load()) << "Get returned before the key was set";
  auto present = setter->Check({"late"});
  ASSERT_TRUE(present.ok());
  EXPECT_FALSE((*present)[0]);
  auto t0 = Clock::now();
  ASSERT_TRUE(setter->Set("late", B("value")).ok());
  t.join();
  EXPECT_LT(SecondsSince(t0), 2.0);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(*got, B("value"));
}

TEST_F(StoreTest, InterruptEndsABlockedCallAndLaterOnes) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  hvd::Result<Bytes> got = hvd::Error(HVD_ERR_INTERNAL, "not run");
  std::atomic<bool> returned{false};
  std::thread t([&] {
    got = c->Get("never-set", 30.0);
    returned = true;
  });
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(returned.load());
  auto t0 = Clock::now();
  c->Interrupt();
  t.join();
  EXPECT_LT(SecondsSince(t0), 2.0);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().code(), HVD_ERR_TIMEOUT) << got.status().message();
  EXPECT_FALSE(c->Check({"never-set"}).ok());
  // The server is unharmed: a fresh client works.
  auto c2 = Connect();
  ASSERT_NE(c2, nullptr);
  EXPECT_TRUE(c2->Set("after", B("1")).ok());
}

TEST(StoreConnect, SelfConnectedSocketIsRecognised) {
  // A socket bound to a port and connected to that same port completes a
  // simultaneous open with itself: what a client dialling a not-yet-bound
  // port of the ephemeral range can run into.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t al = sizeof(a);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &al), 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  EXPECT_TRUE(hvd::rdv::internal::ConnectedToItself(fd));
  ::close(fd);

  // An ordinary connection to a listener is not.
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in b{};
  b.sin_family = AF_INET;
  b.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&b), sizeof(b)), 0);
  ASSERT_EQ(::listen(l, 1), 0);
  socklen_t bl = sizeof(b);
  ASSERT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&b), &bl), 0);
  int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&b), sizeof(b)), 0);
  EXPECT_FALSE(hvd::rdv::internal::ConnectedToItself(c));
  ::close(c);
  ::close(l);
}

TEST_F(StoreTest, GetWakesOnServerSideSet) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    server_->Set("host-key", B("h"));
  });
  auto v = c->Get("host-key", 10.0);
  t.join();
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, B("h"));
}

TEST_F(StoreTest, GetTimesOut) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  auto t0 = Clock::now();
  auto v = c->Get("absent-key", 0.3);
  double took = SecondsSince(t0);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), HVD_ERR_TIMEOUT);
  EXPECT_NE(v.status().message().find("absent-key"), std::string::npos) << v.status().message();
  EXPECT_GE(took, 0.29);
  EXPECT_LT(took, 2.0);

  // A zero timeout is a poll.
  t0 = Clock::now();
  EXPECT_EQ(c->Get("absent-key", 0.0).status().code(), HVD_ERR_TIMEOUT);
  EXPECT_LT(SecondsSince(t0), 1.0);
  EXPECT_EQ(c->Get("absent-key", -1.0).status().code(), HVD_ERR_INVALID_ARGUMENT);

  // The connection survives a timeout.
  ASSERT_TRUE(c->Set("absent-key", B("now")).ok());
  v = c->Get("absent-key", 0.3);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, B("now"));
}

TEST_F(StoreTest, ConcurrentAddsAreExact) {
  constexpr int kThreads = 8, kAdds = 1000;
  // Threads 0-3 have a client each; threads 4-7 share one (client thread safety).
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
  }
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      StoreClient* c = clients[std::min(t, 4)].get();
      for (int i = 0; i < kAdds; ++i) {
        auto r = c->Add("counter", 1);
        if (!r.ok()) {
          ++failures;
          return;
        }
        seen[t].push_back(*r);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);

  // Every intermediate value was returned exactly once: the adds were atomic.
  std::vector<int64_t> all;
  for (auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expect(kThreads * kAdds);
  std::iota(expect.begin(), expect.end(), 1);
  EXPECT_EQ(all, expect);

  // The counter is 8 big-endian bytes; negative deltas work.
  auto v = clients[0]->Get("counter", 0.0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, BigEndian64(kThreads * kAdds));
  auto r = clients[0]->Add("counter", -kThreads * kAdds - 5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, -5);
  r = clients[0]->Add("fresh", 0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 0);

  // A key that is not a counter is refused with a clear error, not a drop.
  ASSERT_TRUE(clients[0]->Set("text", B("abc")).ok());
  r = clients[0]->Add("text", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_NE(r.status().message().find("counter"), std::string::npos) << r.status().message();
  EXPECT_TRUE(clients[0]->Set("after", B("ok")).ok());
  EXPECT_EQ(server_->rejected(), 0u);
}

TEST_F(StoreTest, Check) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Set("x", B("1")).ok());
  ASSERT_TRUE(c->Set("z", Bytes()).ok());
  ASSERT_TRUE(c->Add("n", 3).ok());
  auto r = c->Check({"x", "y", "z", "n", ""});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<bool>{true, false, true, true, false}));
  r = c->Check({});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->empty());
}

TEST_F(StoreTest, ManyClientsExchangeKeys) {
  constexpr int kRanks = 32;
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int i = 0; i < kRanks; ++i) {
    ranks.emplace_back([&, i] {
      auto c = StoreClient::Connect("localhost", server_->port(), secret_, 10.0);
      if (!c.ok()) {
        ++failures;
        return;
      }
      if (!(*c)->Set("rank/" + std::to_string(i), B(std::to_string(i * 7))).ok()) ++failures;
      for (int j = 0; j < kRanks; ++j) {
        auto v = (*c)->Get("rank/" + std::to_string(j), 20.0);
        if (!v.ok() || *v != B(std::to_string(j * 7))) ++failures;
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// ---- authentication and hostile input ---------------------------------------------------------

TEST_F(StoreTest, WrongSecretIsRefused) {
  auto t0 = Clock::now();
  auto bad = StoreClient::Connect("127.0.0.1", server_->port(), NewSecret(), 10.0);
  ASSERT_FALSE(bad.ok());
  EXPECT_LT(SecondsSince(t0), 5.0);  // refused, not retried until the timeout
  EXPECT_EQ(bad.status().code(), HVD_ERR_RENDEZVOUS);
  EXPECT_NE(bad.status().message().find("closed the connection"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("secret"), std::string::npos) << bad.status().message();
  EXPECT_EQ(server_->rejected(), 1u);
  ExpectServing("after-wrong-secret");
  EXPECT_EQ(server_->rejected(), 1u);
}

TEST_F(StoreTest, GarbageDoesNotHurtTheServer) {
  {
    RawSocket s(server_->port());  // text: its first 4 bytes announce ~1.2 GB
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.Send(B("GET / HTTP/1.1\r\nHost: x\r\n\r\n")));
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 1u);
  {
    RawSocket s(server_->port());  // the largest length there is
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.Send(Bytes{0xff, 0xff, 0xff, 0xff, 1, 2, 3}));
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 2u);
  {
    RawSocket s(server_->port());  // a plausible length, random payload and MAC
    ASSERT_TRUE(s.connected());
    Bytes frame = {0, 0, 0, 16};
    Bytes junk = RandomBytes(16 + 32, 7);
    frame.insert(frame.end(), junk.begin(), junk.end());
    ASSERT_TRUE(s.Send(frame));
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 3u);
  {
    RawSocket s(server_->port());  // half a header, then gone
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.Send(Bytes{0, 0}));
  }
  for (int i = 0; i < 100 && server_->rejected() < 4; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(server_->rejected(), 4u);
  {
    RawSocket s(server_->port());  // connects and leaves at once: not an attack
    ASSERT_TRUE(s.connected());
  }
  ExpectServing("after-garbage");
  EXPECT_EQ(server_->rejected(), 4u);
}

TEST_F(StoreTest, ValidRawFrameWorksAndReplayIsRejected) {
  const Bytes key = DecodeHex(secret_);
  const Bytes add = Frame(key, 0, AddPayload("replayed", 1));
  {
    RawSocket s(server_->port());
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.Send(add));
    // Status kOk, then the new value 1: the documented format is the real one.
    Bytes reply = ReadReply(&s, key, kServerToClient | 0);
    Bytes expect = {0};
    Bytes one = BigEndian64(1);
    expect.insert(expect.end(), one.begin(), one.end());
    ASSERT_EQ(reply, expect);
    EXPECT_EQ(server_->rejected(), 0u);

    ASSERT_TRUE(s.Send(add));  // the very same bytes again
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 1u);
  {
    RawSocket s(server_->port());  // out of order: sequence 1 first
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.Send(Frame(key, 1, AddPayload("replayed", 1))));
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 2u);
  {
    RawSocket s(server_->port());  // a frame signed for the other direction
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.Send(Frame(key, kServerToClient | 0, AddPayload("replayed", 1))));
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 3u);
  {
    RawSocket s(server_->port());  // authentic but malformed: unknown command
    ASSERT_TRUE(s.connected());
    ASSERT_TRUE(s.Send(Frame(key, 0, Bytes{99, 1, 2})));
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 4u);
  {
    RawSocket s(server_->port());  // authentic but a field overruns the payload
    ASSERT_TRUE(s.connected());
    Bytes p = AddPayload("k", 1);
    p[4] = 200;  // key length 200 > what follows
    ASSERT_TRUE(s.Send(Frame(key, 0, p)));
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 5u);
  {
    RawSocket s(server_->port());  // authentic but with a trailing byte
    ASSERT_TRUE(s.connected());
    Bytes p = AddPayload("replayed", 1);
    p.push_back(0);
    ASSERT_TRUE(s.Send(Frame(key, 0, p)));
    EXPECT_TRUE(s.WaitClosed());
  }
  EXPECT_EQ(server_->rejected(), 6u);

  // Only the first frame took effect.
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  auto v = c->Get("replayed", 0.0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, BigEndian64(1));
}

// ---- connecting, and failures of the server -----------------------------------------------------

TEST(StoreConnect, NoServerFailsWithinTimeout) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  auto t0 = Clock::now();
  auto c = StoreClient::Connect("127.0.0.1", port, NewSecret(), 0.5);
  double took = SecondsSince(t0);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), HVD_ERR_RENDEZVOUS);
  const std::string& msg = c.status().message();
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
  EXPECT_NE(msg.find("refused"), std::string::npos) << msg;
  EXPECT_GE(took, 0.45);  // it kept retrying
  EXPECT_LT(took, 3.0);
}

TEST(StoreConnect, ClientMayStartBeforeServer) {
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string secret = NewSecret();
  std::unique_ptr<StoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(400ms);
    auto s = StoreServer::Start("", port, secret);  // all interfaces
    if (s.ok()) server = std::move(s).value();
  });
  auto c = StoreClient::Connect("127.0.0.1", port, secret, 10.0);
  starter.join();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE((*c)->Set("k", B("v")).ok());
  Bytes v;
  EXPECT_TRUE(server->TryGet("k", &v));
}

TEST(StoreConnect, SilentServerFailsInBoundedTime) {
  // Listens (the kernel completes the handshake) but never reads or replies.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  auto t0 = Clock::now();
  auto c = StoreClient::Connect("127.0.0.1", ntohs(a.sin_port), NewSecret(), 0.5);
  double took = SecondsSince(t0);
  close(fd);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), HVD_ERR_RENDEZVOUS);
  EXPECT_NE(c.status().message().find("unresponsive"), std::string::npos) << c.status().message();
  EXPECT_LT(took, 5.0);
}

TEST_F(StoreTest, ServerDestructionEndsABlockedGet) {
  auto c = Connect();
  ASSERT_NE(c, nullptr);
  std::atomic<bool> returned{false};
  hvd::Result<Bytes> got = Bytes();
  std::thread t([&] {
    got = c->Get("never", 60.0);
    returned = true;
  });
  std::this_thread::sleep_for(300ms);
  ASSERT_FALSE(returned.load());
  auto t0 = Clock::now();
  server_.reset();
  double destroy = SecondsSince(t0);
  t.join();
  double total = SecondsSince(t0);
  EXPECT_LT(destroy, 2.0);
  EXPECT_LT(total, 2.0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), HVD_ERR_RENDEZVOUS);
  // Later calls fail promptly too.
  t0 = Clock::now();
  EXPECT_FALSE(c->Set("k", B("v")).ok());
  EXPECT_LT(SecondsSince(t0), 2.0);
}

TEST_F(StoreTest, DestructionWithIdleAndHalfSentConnectionsIsPrompt) {
  std::vector<std::unique_ptr<StoreClient>> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(Connect());
    ASSERT_NE(idle.back(), nullptr);
  }
  RawSocket half(server_->port());
  ASSERT_TRUE(half.connected());
  ASSERT_TRUE(half.Send(Bytes{0, 0, 1, 0, 1, 2, 3}));  // 256 announced, 3 sent
  std::this_thread::sleep_for(100ms);
  auto t0 = Clock::now();
  server_.reset();
  EXPECT_LT(SecondsSince(t0), 2.0);
  EXPECT_TRUE(half.WaitClosed());
  for (auto& c : idle) {
    t0 = Clock::now();
    Status s = c->Set("k", B("v"));
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), HVD_ERR_RENDEZVOUS);
    EXPECT_LT(SecondsSince(t0), 2.0);
  }
}

// ---- connection floods and abandoned waits ----------------------------------------------------

// Anyone who can reach the port can open connections without the secret.
// However many sit idle, a client that holds the secret still gets in.
TEST(StoreFlood, IdleConnectionsDoNotLockOutAClient) {
  constexpr int kIdle = 4200;  // over the store's total connection limit
  ASSERT_TRUE(RaiseFdLimit(3 * kIdle)) << "cannot raise RLIMIT_NOFILE";
  const std::string secret = NewSecret();
  auto s = StoreServer::Start("127.0.0.1", 0, secret);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto server = std::move(s).value();
  std::vector<int> idle;
  for (int i = 0; i < kIdle; ++i) {
    int fd = IdleConnection(server->port());
    ASSERT_GE(fd, 0) << "idle connection " << i << ": " << std::strerror(errno);
    idle.push_back(fd);
  }
  const auto t0 = Clock::now();
  auto c = StoreClient::Connect("127.0.0.1", server->port(), secret, 10.0);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE((*c)->Set("in", B("yes")).ok());
  auto v = (*c)->Get("in", 1.0);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, B("yes"));
  EXPECT_LT(SecondsSince(t0), 5.0);
  for (int fd : idle) close(fd);
}

// The documented frame a client that is dropped before authenticating gets:
// kBusy (4), authenticated, as the server's first frame.
TEST(StoreFlood, UnauthenticatedConnectionsMustAuthenticateInTime) {
  const std::string secret = NewSecret();
  const Bytes key = DecodeHex(secret);
  hvd::rdv::StoreServerOptions opts;
  opts.auth_timeout_s = 0.5;
  auto s = StoreServer::Start("127.0.0.1", 0, secret, opts);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto server = std::move(s).value();

  auto c = StoreClient::Connect("127.0.0.1", server->port(), secret, 5.0);
  ASSERT_TRUE(c.ok()) << c.status().message();
  RawSocket idle(server->port());
  ASSERT_TRUE(idle.connected());
  RawSocket half(server->port());  // starts a frame, never finishes it
  ASSERT_TRUE(half.connected());
  ASSERT_TRUE(half.Send(Bytes{0, 0, 0, 9, 1}));
  const auto t0 = Clock::now();
  EXPECT_EQ(ReadReply(&idle, key, kServerToClient), Bytes{4});
  EXPECT_TRUE(idle.WaitClosed());
  const double took = SecondsSince(t0);
  EXPECT_GE(took, 0.4);
  EXPECT_LT(took, 3.0);
  EXPECT_EQ(ReadReply(&half, key, kServerToClient), Bytes{4});
  EXPECT_TRUE(half.WaitClosed());
  EXPECT_EQ(server->rejected(), 2u);
  // An authenticated connection may stay silent much longer.
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE((*c)->Set("still", B("here")).ok());
  auto v = (*c)->Get("still", 0.0);
  ASSERT_TRUE(v.ok()) << v.status().message();
  EXPECT_EQ(*v, B("here"));
  // A first frame over 64 KiB is refused before anything is read of it.
  RawSocket big(server->port());
  ASSERT_TRUE(big.connected());
  ASSERT_TRUE(big.Send(Bytes{0, 1, 0, 1}));  // 65537
  EXPECT_TRUE(big.WaitClosed());
  EXPECT_EQ(server->rejected(), 3u);
}

// When the unauthenticated ones are at their limit, a new one drops the oldest.
TEST(StoreFlood, TheOldestUnauthenticatedConnectionMakesRoom) {
  const std::string secret = NewSecret();
  const Bytes key = DecodeHex(secret);
  hvd::rdv::StoreServerOptions opts;
  opts.max_unauthenticated = 4;
  opts.auth_timeout_s = 60;
  auto s = StoreServer::Start("127.0.0.1", 0, secret, opts);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto server = std::move(s).value();
  std::vector<std::unique_ptr<RawSocket>> idle;
  for (int i = 0; i < 10; ++i) {
    idle.push_back(std::make_unique<RawSocket>(server->port()));
    ASSERT_TRUE(idle.back()->connected());
  }
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(ReadReply(idle[i].get(), key, kServerToClient), Bytes{4}) << i;
    EXPECT_TRUE(idle[i]->WaitClosed()) << i;
  }
  EXPECT_EQ(server->rejected(), 6u);
  // The newest four are still open: a real client now pushes out one more.
  auto c = StoreClient::Connect("127.0.0.1", server->port(), secret, 5.0);
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE((*c)->Set("k", B("v")).ok());
  EXPECT_EQ(server->rejected(), 7u);
  EXPECT_EQ(ReadReply(idle[6].get(), key, kServerToClient), Bytes{4});
  EXPECT_TRUE(idle[6]->WaitClosed());
}

// Someone without the secret opens connections as fast as they can, for the
// whole test, while a client that holds it connects again and again.
TEST(StoreFlood, AConnectionFloodDoesNotLockOutAClient) {
  ASSERT_TRUE(RaiseFdLimit(4096)) << "cannot raise RLIMIT_NOFILE";
  const std::string secret = NewSecret();
  hvd::rdv::StoreServerOptions opts;
  opts.max_unauthenticated = 8;
  opts.auth_timeout_s = 1.0;
  auto s = StoreServer::Start("127.0.0.1", 0, secret, opts);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto server = std::move(s).value();
  std::atomic<bool> stop{false};
  std::atomic<int> opened{0};
  std::thread flood([&] {
    std::vector<int> ring(1000, -1);
    size_t next = 0;
    while (!stop.load()) {
      int fd = IdleConnection(server->port());
      if (fd < 0) continue;
      ++opened;
      if (ring[next] >= 0) close(ring[next]);
      ring[next] = fd;
      next = (next + 1) % ring.size();
    }
    for (int fd : ring) {
      if (fd >= 0) close(fd);
    }
  });
  while (opened.load() < 200) std::this_thread::sleep_for(10ms);
  const auto t0 = Clock::now();
  // Rounds for 3 s (and at least 20), each a fresh connection.
  int ok = 0, rounds = 0;
  std::string first_error;
  for (int round = 0; round < 20 || SecondsSince(t0) < 3.0; ++round) {
    ++rounds;
    auto c = StoreClient::Connect("127.0.0.1", server->port(), secret, 10.0);
    if (!c.ok()) {
      if (first_error.empty()) first_error = c.status().message();
      continue;
    }
    const std::string k = "round/" + std::to_string(round);
    auto v = (*c)->Set(k, B(k)).ok() ? (*c)->Get(k, 1.0) : hvd::Result<Bytes>(Bytes());
    if (v.ok() && *v == B(k)) ++ok;
  }
  const double took = SecondsSince(t0);
  const int flood_size = opened.load();
  stop = true;
  flood.join();
  EXPECT_EQ(ok, rounds) << first_error;
  EXPECT_LT(took, 3.0 + 20 * 10.0);
  EXPECT_GT(flood_size, 1000) << "the flood was too small to test anything";
  EXPECT_GT(server->rejected(), 100u);
}

// A client told it was dropped before authenticating (kBusy) connects again;
// a plain close (a wrong secret) stays final. The server here is a stand-in
// that answers the handshake by hand.
TEST(StoreConnect, ABusyServerIsRetriedAndAPlainCloseIsNot) {
  const std::string secret = NewSecret();
  const Bytes key = DecodeHex(secret);
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(l, 8), 0);
  socklen_t al = sizeof(a);
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &al);
  const int port = ntohs(a.sin_port);
  timeval tv{5, 0};
  setsockopt(l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));  // bounds accept
  // Each entry: what the stand-in answers the n-th connection's Ping with.
  auto serve = [&](std::vector<Bytes> answers, std::atomic<int>* accepted) {
    for (const Bytes& answer : answers) {
      int fd = accept(l, nullptr, nullptr);
      if (fd < 0) return;
      ++*accepted;
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      uint8_t ping[4 + 5 + 32];  // header, kPing u32 version, MAC
      size_t got = 0;
      while (got < sizeof(ping)) {
        ssize_t r = recv(fd, ping + got, sizeof(ping) - got, 0);
        if (r <= 0) break;
        got += static_cast<size_t>(r);
      }
      if (!answer.empty()) {
        Bytes f = Frame(key, kServerToClient, answer);
        send(fd, f.data(), f.size(), MSG_NOSIGNAL);
      }
      close(fd);
    }
  };
  {
    std::atomic<int> accepted{0};
    std::thread t(serve, std::vector<Bytes>{{4}, {4}, {0, 0, 0, 0, 1}}, &accepted);
    auto c = StoreClient::Connect("127.0.0.1", port, secret, 10.0);
    t.join();
    EXPECT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(accepted.load(), 3);
  }
  {
    std::atomic<int> accepted{0};
    std::thread t(serve, std::vector<Bytes>{Bytes()}, &accepted);
    const auto t0 = Clock::now();
    auto c = StoreClient::Connect("127.0.0.1", port, secret, 3.0);
    t.join();
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("closed the connection"), std::string::npos) << c.status().message();
    EXPECT_EQ(accepted.load(), 1);
    EXPECT_LT(SecondsSince(t0), 2.0);
  }
  close(l);
}

// Limits on authenticated connections are reported, not silent.
TEST(StoreFlood, TooManyAuthenticatedConnectionsAreRefusedWithAReason) {
  const std::string secret = NewSecret();
  hvd::rdv::StoreServerOptions opts;
  opts.max_connections = 2;
  auto s = StoreServer::Start("127.0.0.1", 0, secret, opts);
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto server = std::move(s).value();
  auto a = StoreClient::Connect("127.0.0.1", server->port(), secret, 5.0);
  auto b = StoreClient::Connect("127.0.0.1", server->port(), secret, 5.0);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = StoreClient::Connect("127.0.0.1", server->port(), secret, 5.0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("limit"), std::string::npos) << c.status().message();
  a->reset();
  // The slot is free once the server has seen the close.
  hvd::Result<std::unique_ptr<StoreClient>> d = hvd::Error(HVD_ERR_INTERNAL, "not run");
  for (int i = 0; i < 50 && !d.ok(); ++i) {
    std::this_thread::sleep_for(20ms);
    d = StoreClient::Connect("127.0.0.1", server->port(), secret, 5.0);
  }
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE((*d)->Set("k", B("v")).ok());
}

// A client sends its next request only after the reply: one sent while its
// Get waits is malformed.
TEST_F(StoreTest, ARequestSentBeforeTheReplyIsMalformed) {
  const Bytes key = DecodeHex(secret_);
  RawSocket s(server_->port());
  ASSERT_TRUE(s.connected());
  ASSERT_TRUE(s.Send(Frame(key, 0, GetPayload("absent", 10000))));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(s.Send(Frame(key, 1, AddPayload("n", 1))));
  EXPECT_TRUE(s.WaitClosed());
  EXPECT_EQ(server_->rejected(), 1u);
  ExpectServing("after-early-request");
}

// A client that disconnects while its Get waits releases what the server
// held for it at once, and waiting Gets do not cost a server thread each.
TEST_F(StoreTest, AbandonedBlockingGetsLeaveNothingBehind) {
  constexpr int kWaiters = 20;
  const int baseline = CountThreads();
  ASSERT_GT(baseline, 0);
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < kWaiters; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
  }
  std::vector<hvd::Status> got(kWaiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] { got[i] = clients[i]->Get("never-set", 60.0).status(); });
  }
  // Raw clients too: a Get of the longest wait, then a plain close.
  const Bytes key = DecodeHex(secret_);
  {
    std::vector<std::unique_ptr<RawSocket>> raw;
    for (int i = 0; i < kWaiters; ++i) {
      raw.push_back(std::make_unique<RawSocket>(server_->port()));
      ASSERT_TRUE(raw.back()->connected());
      ASSERT_TRUE(raw.back()->Send(Frame(key, 0, GetPayload("never-set", ~uint64_t{0}))));
    }
    std::this_thread::sleep_for(300ms);
    // Only this test's own threads are new: none per waiting Get in the store.
    EXPECT_LE(CountThreads(), baseline + kWaiters);
  }  // the raw sockets close here
  for (auto& c : clients) c->Interrupt();
  for (auto& t : threads) t.join();
  for (const auto& s : got) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.code(), HVD_ERR_TIMEOUT) << s.message();
  }
  clients.clear();
  EXPECT_EQ(WaitForThreads(baseline, 2.0), baseline);
  EXPECT_EQ(server_->rejected(), 0u);
  ExpectServing("after-abandoned-gets");
}

// Many Gets wait at once: those whose key is set get the value, the others
// time out on time.
TEST_F(StoreTest, ManyWaitingGetsAreAnsweredOrTimeOut) {
  constexpr int kEach = 16;
  const int baseline = CountThreads();
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < 2 * kEach; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
  }
  std::vector<hvd::Result<Bytes>> got(2 * kEach, hvd::Error(HVD_ERR_INTERNAL, "not run"));
  std::vector<double> took(2 * kEach, -1);
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int i = 0; i < 2 * kEach; ++i) {
    threads.emplace_back([&, i] {
      got[i] = i < kEach ? clients[i]->Get("set-later", 10.0) : clients[i]->Get("absent", 0.5);
      took[i] = SecondsSince(t0);
    });
  }
  std::this_thread::sleep_for(1s);
  const double set_at = SecondsSince(t0);
  ASSERT_TRUE(clients[0] != nullptr);
  auto setter = Connect();
  ASSERT_NE(setter, nullptr);
  ASSERT_TRUE(setter->Set("set-later", B("value")).ok());
  for (auto& t : threads) t.join();
  for (int i = 0; i < kEach; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status().message();
    EXPECT_EQ(*got[i], B("value"));
    EXPECT_GE(took[i], set_at);
    EXPECT_LT(took[i], set_at + 2.0);
  }
  for (int i = kEach; i < 2 * kEach; ++i) {
    EXPECT_EQ(got[i].status().code(), HVD_ERR_TIMEOUT) << got[i].status().message();
    EXPECT_GE(took[i], 0.49);
    EXPECT_LT(took[i], set_at);
  }
  clients.clear();
  setter.reset();
  EXPECT_EQ(WaitForThreads(baseline, 2.0), baseline);
}

}  // namespace

// A stand-in for an hvd rank, for the launcher tests: it talks to hvdrun's
// rendezvous store the way the library does (connects with HVD_SECRET to
// HVD_RENDEZVOUS_ADDR and sets ready/<rank>), without needing the library.
//
//   rank_helper env [--connect] [--wait-all]   print this rank's variables
//   rank_helper connect [--sleep S]            connect, then sleep S seconds
//   rank_helper sleep S [marker...]            sleep S seconds (marker: for pgrep)
//   rank_helper spam N LEN                     N long lines on stdout and stderr,
//                                              each written in several pieces
//   rank_helper security                       wrong secrets and malformed frames
//                                              against the store; then connect
//   rank_helper progress STYLE N MS [STAGGER]  N progress updates on stdout, MS ms
//                                              apart, each one write() stamped with
//                                              its time (see CmdProgress)
//   rank_helper store set KEY VALUE            the store, for scripts (elastic
//   rank_helper store get KEY TIMEOUT          workers): set a key; print a key's
//   rank_helper store check KEY                value once it exists (exit 1 after
//                                              TIMEOUT s); exit 0 if KEY exists, else 1
//   rank_helper stamp RAW                      not a rank: reads stdin to its end,
//                                              copies it to the file RAW and prints
//                                              each read's arrival time (CmdStamp)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store.h"

namespace {

using hvd::rdv::StoreClient;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

int Rank() { return std::atoi(Env("HVD_RANK").c_str()); }

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "rank_helper[%s]: %s\n", Env("HVD_RANK").c_str(), msg.c_str());
  std::exit(1);
}

std::unique_ptr<StoreClient> ConnectWith(const std::string& secret, double timeout_s,
                                         hvd::Status* why = nullptr) {
  std::string host;
  int port = 0;
  hvd::Status st = hvd::rdv::ParseHostPort(Env("HVD_RENDEZVOUS_ADDR"), &host, &port);
  if (!st.ok()) Die("bad HVD_RENDEZVOUS_ADDR: " + st.message());
  auto c = StoreClient::Connect(host, port, secret, timeout_s);
  if (!c.ok()) {
    if (why) *why = c.status();
    return nullptr;
  }
  return std::move(c).value();
}

std::unique_ptr<StoreClient> ConnectAndMarkReady() {
  hvd::Status why;
  auto c = ConnectWith(Env("HVD_SECRET"), 20, &why);
  if (!c) Die("cannot connect to the store: " + why.message());
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  std::string n = name;
  hvd::Status st = c->Set("ready/" + std::to_string(Rank()), hvd::rdv::Bytes(n.begin(), n.end()));
  if (!st.ok()) Die("cannot set ready: " + st.message());
  return c;
}

// Waits until every rank is ready. Then every rank says it is done with the
// store, and the ranks on the store's node (cross rank 0) wait for all of
// them, so the store outlives every rank's last request.
void WaitAll(StoreClient* c) {
  int size = std::atoi(Env("HVD_SIZE").c_str());
  for (const char* phase : {"ready/", "done/"}) {
    if (std::string(phase) == "done/") {
      std::string one = "1";
      hvd::Status st = c->Set("done/" + std::to_string(Rank()), hvd::rdv::Bytes(one.begin(), one.end()));
      if (!st.ok()) Die("cannot set done: " + st.message());
      if (Env("HVD_CROSS_RANK") != "0") return;
    }
    for (int r = 0; r < size; ++r) {
      auto v = c->Get(phase + std::to_string(r), 30);
      if (!v.ok()) Die(std::string("waiting for ") + phase + std::to_string(r) + ": " + v.status().message());
    }
  }
}

int CmdEnv(int argc, char** argv) {
  bool connect = false, wait_all = false;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--connect") == 0) connect = true;
    if (std::strcmp(argv[i], "--wait-all") == 0) wait_all = true;
  }
  std::unique_ptr<StoreClient> c;
  if (connect) c = ConnectAndMarkReady();
  if (c && wait_all) WaitAll(c.get());
  std::string line = "ENV";
  for (const char* k : {"HVD_RANK", "HVD_SIZE", "HVD_LOCAL_RANK", "HVD_LOCAL_SIZE", "HVD_CROSS_RANK",
                        "HVD_CROSS_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                        "HVD_HOSTNAME"}) {
    line += std::string(" ") + k + "=" + Env(k);
  }
  std::printf("%s\n", line.c_str());
  // Optional settings: one line each, only when set.
  for (const char* k : {"HVD_TRANSPORT", "HVD_NETWORK_INTERFACE", "HVD_TIMELINE",
                        "HVD_FUSION_THRESHOLD", "HVD_CYCLE_TIME", "HVD_START_TIMEOUT", "HVD_EXTRA"}) {
    if (std::getenv(k)) std::printf("OPT rank=%d %s=%s\n", Rank(), k, Env(k).c_str());
  }
  std::string secret = Env("HVD_SECRET");
  bool hex = secret.size() == 64 && secret.find_first_not_of("0123456789abcdef") == std::string::npos;
  std::printf("SECRET rank=%d ok=%d\n", Rank(), hex ? 1 : 0);
  std::string host;
  int port = 0;
  bool addr_ok = hvd::rdv::ParseHostPort(Env("HVD_RENDEZVOUS_ADDR"), &host, &port).ok() && port > 0;
  std::printf("ADDR rank=%d ok=%d\n", Rank(), addr_ok ? 1 : 0);
  std::fflush(stdout);
  return 0;
}

int CmdConnect(int argc, char** argv) {
  auto c = ConnectAndMarkReady();
  double sleep_s = 0;
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--sleep") == 0) sleep_s = std::atof(argv[i + 1]);
  }
  std::printf("connected rank=%d\n", Rank());
  std::fflush(stdout);
  if (sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
  return 0;
}

void WriteFully(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) std::exit(2);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Each line is "R<rank> <i> <payload> END" and goes out in three write()s
// with a yield in between, so a launcher that forwarded raw chunks would mix
// ranks mid-line.
int CmdSpam(int argc, char** argv) {
  if (argc < 4) Die("spam N LEN");
  int n = std::atoi(argv[2]);
  int len = std::atoi(argv[3]);
  int r = Rank();
  std::string payload(static_cast<size_t>(len), static_cast<char>('a' + r % 26));
  for (int i = 0; i < n; ++i) {
    int fd = (i % 2 == 0) ? 1 : 2;
    std::string line = "R" + std::to_string(r) + " " + std::to_string(i) + " " + payload + " END\n";
    size_t a = line.size() / 3, b = 2 * line.size() / 3;
    WriteFully(fd, line.data(), a);
    std::this_thread::yield();
    WriteFully(fd, line.data() + a, b - a);
    if (i % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    WriteFully(fd, line.data() + b, line.size() - b);
  }
  // A last line with no newline: hvdrun must still forward it whole.
  std::string tail = "R" + std::to_string(r) + " tail-without-newline";
  WriteFully(1, tail.data(), tail.size());
  return 0;
}

// Wall-clock seconds: comparable between the writer (a rank) and the reader
// (stamp), which run as different processes.
std::string WallClock() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%lld.%06ld", static_cast<long long>(ts.tv_sec), ts.tv_nsec / 1000);
  return buf;
}

// Update i of rank r reads "r<r>u<i>@<time written>" and goes out in one
// write(), MS ms after the one before (the first after r * STAGGER ms):
//   cr-end    "<update>\r"   (a counter redrawn in place)
//   cr-start  "\r<update>"   (what tqdm writes: the text waits for the next '\r')
//   partial   "<update> "    (a line growing piece by piece)
// A '\n' ends the output, MS ms after the last update.
int CmdProgress(int argc, char** argv) {
  if (argc < 5) Die("progress cr-end|cr-start|partial N MS [STAGGER]");
  std::string style = argv[2];
  int n = std::atoi(argv[3]);
  auto gap = std::chrono::milliseconds(std::atoi(argv[4]));
  int stagger = argc > 5 ? std::atoi(argv[5]) : 0;
  if (style != "cr-end" && style != "cr-start" && style != "partial") Die("bad style " + style);
  std::this_thread::sleep_for(std::chrono::milliseconds(stagger * Rank()));
  for (int i = 1; i <= n; ++i) {
    std::string u = "r" + std::to_string(Rank()) + "u" + std::to_string(i) + "@" + WallClock();
    if (style == "cr-end") u += "\r";
    if (style == "cr-start") u = "\r" + u;
    if (style == "partial") u += " ";
    WriteFully(1, u.data(), u.size());
    std::this_thread::sleep_for(gap);
  }
  WriteFully(1, "\n", 1);
  return 0;
}

// Reads stdin to its end; writes every byte to the file RAW and, per read(),
// one line "<arrival time> <bytes>" to stdout, with '\r' shown as <CR> and
// '\n' as <LF>.
int CmdStamp(int argc, char** argv) {
  if (argc < 3) Die("stamp RAW");
  int raw = ::open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (raw < 0) Die(std::string("cannot create ") + argv[2]);
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(0, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::string line = WallClock() + " ";
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\r') {
        line += "<CR>";
      } else if (buf[i] == '\n') {
        line += "<LF>";
      } else {
        line += buf[i];
      }
    }
    line += "\n";
    WriteFully(raw, buf, static_cast<size_t>(n));
    WriteFully(1, line.data(), line.size());
  }
  ::close(raw);
  return 0;
}

// A raw TCP connection to the store.
int RawConnect() {
  std::string host;
  int port = 0;
  if (!hvd::rdv::ParseHostPort(Env("HVD_RENDEZVOUS_ADDR"), &host, &port).ok()) Die("bad addr");
  addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) Die("resolve");
  int fd = ::socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0 || ::connect(fd, res->ai_addr, res->ai_addrlen) != 0) Die("raw connect failed");
  freeaddrinfo(res);
  return fd;
}

// Sends bytes and checks that the server drops the connection within 5 s.
bool ServerDrops(const std::string& what, const std::vector<uint8_t>& bytes) {
  int fd = RawConnect();
  // The server may close while we still send: that is fine.
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool dropped = false;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char buf[256];
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) {
        dropped = true;
        break;
      }
      // Any bytes at all would be a reply to an unauthenticated peer.
      std::printf("security: %s: the server answered %zd bytes\n", what.c_str(), n);
      break;
    }
  }
  ::close(fd);
  std::printf("security: %s: %s\n", what.c_str(), dropped ? "dropped" : "NOT dropped");
  return dropped;
}

int CmdSecurity() {
  bool ok = true;
  // A key only the job can see.
  auto good = ConnectWith(Env("HVD_SECRET"), 20);
  if (!good) Die("cannot connect with the job's secret");
  std::string v = "hidden";
  if (!good->Set("probe/secret-data", hvd::rdv::Bytes(v.begin(), v.end())).ok()) Die("set failed");

  // Wrong secrets: refused at connect, or at the latest when reading.
  for (const std::string& bad : {hvd::rdv::NewSecret(), std::string(64, '0')}) {
    hvd::Status why;
    auto c = ConnectWith(bad, 2, &why);
    bool refused = true;
    if (c) {
      auto got = c->Get("probe/secret-data", 1);
      refused = !got.ok();
    }
    std::printf("security: wrong secret: %s\n", refused ? "refused" : "NOT refused");
    ok = ok && refused;
  }

  // Malformed input: a frame with a bad MAC, a huge length prefix, a length
  // just over the limit, and plain garbage with a small length.
  std::vector<uint8_t> bad_mac = {0, 0, 0, 5, 1, 2, 3, 4, 5};
  bad_mac.resize(bad_mac.size() + 32, 0xAB);
  ok = ServerDrops("bad MAC", bad_mac) && ok;
  ok = ServerDrops("huge length", {0xFF, 0xFF, 0xFF, 0xFF, 1, 2, 3}) && ok;
  uint32_t over = static_cast<uint32_t>(hvd::rdv::kMaxFrame + 1);
  ok = ServerDrops("length over kMaxFrame",
                   {static_cast<uint8_t>(over >> 24), static_cast<uint8_t>(over >> 16),
                    static_cast<uint8_t>(over >> 8), static_cast<uint8_t>(over), 0, 0}) && ok;
  std::vector<uint8_t> garbage = {0, 0, 0, 64};
  for (int i = 0; i < 96; ++i) garbage.push_back(static_cast<uint8_t>(i * 37 + 11));
  ok = ServerDrops("garbage", garbage) && ok;

  // The store still serves the job.
  auto again = ConnectAndMarkReady();
  auto got = again->Get("probe/secret-data", 5);
  bool intact = got.ok() && std::string(got->begin(), got->end()) == "hidden";
  std::printf("security: store still serves: %s\n", intact ? "yes" : "NO");
  ok = ok && intact;
  std::printf("security: %s\n", ok ? "ok" : "FAILED");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

int CmdStore(int argc, char** argv) {
  if (argc < 4) Die("store set KEY VALUE | store get KEY TIMEOUT | store check KEY");
  std::string op = argv[2], key = argv[3];
  hvd::Status why;
  auto c = ConnectWith(Env("HVD_SECRET"), 10, &why);
  if (!c) Die("cannot connect to the store: " + why.message());
  if (op == "set" && argc == 5) {
    std::string v = argv[4];
    hvd::Status st = c->Set(key, hvd::rdv::Bytes(v.begin(), v.end()));
    if (!st.ok()) Die("set " + key + ": " + st.message());
    return 0;
  }
  if (op == "get" && argc == 5) {
    auto v = c->Get(key, std::atof(argv[4]));
    if (!v.ok()) {
      std::fprintf(stderr, "rank_helper: get %s: %s\n", key.c_str(), v.status().message().c_str());
      return 1;
    }
    std::printf("%s\n", std::string(v->begin(), v->end()).c_str());
    return 0;
  }
  if (op == "check" && argc == 4) {
    auto v = c->Check({key});
    if (!v.ok()) Die("check " + key + ": " + v.status().message());
    return (*v)[0] ? 0 : 1;
  }
  Die("bad store command");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Die("usage: rank_helper env|connect|sleep|spam|security|progress|stamp|store ...");
  std::string cmd = argv[1];
  if (cmd == "env") return CmdEnv(argc, argv);
  if (cmd == "connect") return CmdConnect(argc, argv);
  if (cmd == "spam") return CmdSpam(argc, argv);
  if (cmd == "security") return CmdSecurity();
  if (cmd == "progress") return CmdProgress(argc, argv);
  if (cmd == "stamp") return CmdStamp(argc, argv);
  if (cmd == "store") return CmdStore(argc, argv);
  if (cmd == "sleep") {
    if (argc < 3) Die("sleep S");
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(argv[2])));
    return 0;
  }
  Die("unknown command " + cmd);
}

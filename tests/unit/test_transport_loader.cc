// The transport loader and what the core hands to plugins: plugin search
// over several folders, required and optional table entries, the lifetime
// of the transport's name, and the noexcept callbacks of the plugin env.
// The plugins are a fake built from fake_transport_plugin.c (FAKE_PLUGIN_LIB),
// copied into temporary folders as libhvd_transport_fake.so.
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/observability/logging.h"
#include "transport/transport.h"
#include "rendezvous/store.h"
#include "scoped_env.h"

#ifndef FAKE_PLUGIN_LIB
#error "FAKE_PLUGIN_LIB must name the built fake transport plugin"
#endif

namespace hvd {
namespace {

using hvd::test::ScopedEnv;

// Not a shared library, and long enough for dlopen to read a header from.
const std::string kNotElf = std::string(256, 'x') + "\n";

// A temporary folder, removed with what the test put in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hvd-loader-XXXXXX";
    const char* d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    path_ = d != nullptr ? d : "/nonexistent";
  }
  ~TempDir() {
    for (const std::string& f : files_) unlink(f.c_str());
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  // Writes `bytes` to path()/name.
  std::string Write(const std::string& name, const std::string& bytes) {
    std::string p = path_ + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    files_.push_back(p);
    return p;
  }
  // Copies the fake plugin to path()/libhvd_transport_fake.so.
  std::string CopyFake() {
    std::ifstream in(FAKE_PLUGIN_LIB, std::ios::binary);
    EXPECT_TRUE(in.good()) << FAKE_PLUGIN_LIB;
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return Write("libhvd_transport_fake.so", bytes);
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

hvd_transport_env_t OneRankEnv() {
  hvd_transport_env_t env{};
  env.struct_size = sizeof(env);
  env.rank = 0;
  env.size = 1;
  env.local_rank = env.cross_rank = 0;
  env.local_size = env.cross_size = 1;
  env.timeout_s = 5;
  env.start_timeout_s = 5;
  return env;
}

bool Loaded(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

// ---- the transport's name ----------------------------------------------------

TEST(TransportName, IsTheCoresOwnStorage) {
  TempDir dir;
  const std::string plugin = dir.CopyFake();
  Logger log;
  auto t = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
  ASSERT_TRUE(t.ok()) << t.status().message();
  const char* name = (*t)->name();
  ASSERT_NE(name, nullptr);
  EXPECT_STREQ(name, "fake");
  // The name is not the plugin's own memory.
  Dl_info info{};
  if (dladdr(name, &info) != 0 && info.dli_fname != nullptr) {
    EXPECT_EQ(std::string(info.dli_fname).find(dir.path()), std::string::npos)
        << "the name lies in " << info.dli_fname;
  }
  t->reset();
  EXPECT_STREQ(name, "fake");
  // The same name again: the same storage.
  auto t2 = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
  ASSERT_TRUE(t2.ok()) << t2.status().message();
  EXPECT_EQ((*t2)->name(), name);
}

// A plugin that loaded stays loaded after its transport ends, and after the
// probes that only look (Check, Capabilities): UCX does not survive being
// unloaded and loaded again in one process, and an elastic reset or a probe
// followed by the job's own transport would do that (src/transport/README.md).
TEST(TransportLoader, APluginThatLoadedStaysLoaded) {
  TempDir dir;
  const std::string plugin = dir.CopyFake();
  ASSERT_FALSE(Loaded(plugin));
  ASSERT_TRUE(Transport::Check("fake", dir.path()).ok());
  EXPECT_TRUE(Loaded(plugin)) << "Check closed the plugin it loaded";
  auto caps = Transport::Capabilities("fake", dir.path());
  ASSERT_TRUE(caps.ok()) << caps.status().message();
  EXPECT_TRUE(Loaded(plugin));
  Logger log;
  auto t = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
  ASSERT_TRUE(t.ok()) << t.status().message();
  t->reset();
  EXPECT_TRUE(Loaded(plugin)) << "the transport's end closed its plugin";
  auto again = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
  ASSERT_TRUE(again.ok()) << again.status().message();
}

TEST(TransportName, BuiltInNamesAreLibhvdsLiterals) {
  for (const char* n : {"local", "gloo", "mpi"}) {
    std::string copy = n;  // not the literal the table holds
    const char* p = PersistentTransportName(copy.c_str());
    ASSERT_NE(p, nullptr);
    EXPECT_STREQ(p, n);
    EXPECT_NE(static_cast<const void*>(p), static_cast<const void*>(copy.c_str()));
    Dl_info info{};
    ASSERT_NE(dladdr(p, &info), 0) << n << " is not in any loaded object";
    // This test links the core statically: libhvd's code is the program's.
    Dl_info self{};
    ASSERT_NE(dladdr(reinterpret_cast<void*>(&PersistentTransportName), &self), 0);
    EXPECT_STREQ(info.dli_fname, self.dli_fname);
  }
  EXPECT_EQ(PersistentTransportName(nullptr), nullptr);
  std::string other = "somebody_else";
  const char* p = PersistentTransportName(other.c_str());
  other.assign("changed!!!!!!");
  EXPECT_STREQ(p, "somebody_else");
  EXPECT_EQ(PersistentTransportName("somebody_else"), p);
}

// ---- required and optional entries -------------------------------------------

TEST(TransportLoader, EveryRequiredEntryIsCheckedAtLoad) {
  TempDir dir;
  const std::string plugin = dir.CopyFake();
  Logger log;
  for (const char* entry : {"name", "init", "finalize", "allreduce", "allgatherv", "broadcast",
                            "alltoallv", "barrier", "last_error"}) {
    SCOPED_TRACE(entry);
    ScopedEnv null_entry("FAKE_PLUGIN_NULL", entry);
    Status check = Transport::Check("fake", dir.path());
    EXPECT_EQ(check.code(), HVD_ERR_VERSION) << check.message();
    auto t = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), HVD_ERR_VERSION);
    const std::string& msg = t.status().message();
    EXPECT_NE(msg.find(plugin), std::string::npos) << msg;
    EXPECT_NE(msg.find("required entry '" + std::string(entry) + "'"), std::string::npos) << msg;
    EXPECT_FALSE(Loaded(plugin)) << "a rejected plugin stays loaded";
  }
}

TEST(TransportLoader, NullOptionalEntriesAreAbsent) {
  TempDir dir;
  dir.CopyFake();
  Logger log;
  {
    // Native collectives without reducescatter, and no point-to-point or
    // shared memory to run one: neither reducescatter nor spans are served.
    auto t = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
    ASSERT_TRUE(t.ok()) << t.status().message();
    Transport& tr = **t;
    EXPECT_FALSE(tr.has_reducescatter());
    EXPECT_FALSE(tr.allreduce_spans(8));
    EXPECT_FALSE(tr.allreduce_spans(size_t{64} << 20));
    float buf[2] = {1, 2};
    size_t counts[1] = {2};
    EXPECT_EQ(tr.Reducescatter(buf, counts, HVD_FLOAT32, HVD_SUM).code(), HVD_ERR_UNSUPPORTED);
    hvd_transport_span_t span{buf, 2};
    EXPECT_EQ(tr.AllreduceSpans(&span, 1, HVD_FLOAT32, HVD_SUM).code(), HVD_ERR_UNSUPPORTED);
    // The core asks a plugin only at start, for the keys it knows; any other
    // key is unsupported without a call into the plugin (any thread may ask).
    EXPECT_EQ(tr.Query("answer").status().code(), HVD_ERR_UNSUPPORTED);
    EXPECT_EQ(*tr.Query("abi"), HVD_TRANSPORT_ABI);
    EXPECT_TRUE(tr.Allreduce(buf, 2, HVD_FLOAT32, HVD_SUM).ok());
  }
  {
    // An optional entry the caps do not promise, NULL: absent, not a crash.
    ScopedEnv null_entry("FAKE_PLUGIN_NULL", "isend");
    auto t = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ((*t)->Query("answer").status().code(), HVD_ERR_UNSUPPORTED);
    EXPECT_FALSE((*t)->allreduce_spans(size_t{64} << 20));
  }
}

// ---- the search over folders -------------------------------------------------

TEST(TransportLoader, ABrokenPluginDoesNotEndTheSearch) {
  TempDir broken, good;
  const std::string bad = broken.Write("libhvd_transport_fake.so", kNotElf);
  good.CopyFake();
  Logger log;
  const std::string path = broken.path() + ":" + good.path();
  EXPECT_TRUE(Transport::Check("fake", path).ok()) << Transport::Check("fake", path).message();
  auto t = Transport::Open("fake", path, OneRankEnv(), TransportOptions(), &log);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_STREQ((*t)->name(), "fake");
}

TEST(TransportLoader, TheErrorNamesEveryFolderAndWhatWentWrong) {
  TempDir broken, empty, unusable;
  const std::string bad = broken.Write("libhvd_transport_fake.so", kNotElf);
  const std::string plugin = unusable.CopyFake();
  ScopedEnv null_entry("FAKE_PLUGIN_NULL", "barrier");
  const std::string path = broken.path() + ":" + empty.path() + ":" + unusable.path();
  Status s = Transport::Check("fake", path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), HVD_ERR_VERSION) << s.message();
  const std::string& msg = s.message();
  // The broken file, with dlopen's own words (which name the file).
  EXPECT_NE(msg.find(bad + ": cannot load: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid ELF header"), std::string::npos) << msg;
  // The folder without the file.
  EXPECT_NE(msg.find(empty.path() + ": no libhvd_transport_fake.so"), std::string::npos) << msg;
  // The plugin without a barrier.
  EXPECT_NE(msg.find(plugin + ": "), std::string::npos) << msg;
  EXPECT_NE(msg.find("required entry 'barrier'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("HVD_TRANSPORT_PATH"), std::string::npos) << msg;
  // In the order searched.
  EXPECT_LT(msg.find(bad), msg.find(empty.path()));
  EXPECT_LT(msg.find(empty.path()), msg.find(plugin));
}

TEST(TransportLoader, OnlyUnloadableFilesIsNotFound) {
  TempDir broken;
  broken.Write("libhvd_transport_fake.so", kNotElf);
  Status s = Transport::Check("fake", broken.path());
  EXPECT_EQ(s.code(), HVD_ERR_NOT_FOUND) << s.message();
  EXPECT_NE(s.message().find("cannot load"), std::string::npos) << s.message();
}

TEST(TransportLoader, NoFileAnywhereKeepsTheNotFoundMessage) {
  TempDir a, b;
  Status s = Transport::Check("fake", a.path() + ":" + b.path());
  EXPECT_EQ(s.code(), HVD_ERR_NOT_FOUND);
  EXPECT_NE(s.message().find("libhvd_transport_fake.so was not found in " + a.path() + ", " +
                             b.path()),
            std::string::npos)
      << s.message();
}

// ---- the plugin env's callbacks ----------------------------------------------

// A store whose calls throw what the test says.
class ThrowingStore : public rdv::StoreClient {
 public:
  enum Mode { kOk, kBadAlloc, kRuntime, kInt };
  Mode mode = kOk;
  std::string last_key;

  Status Set(const std::string& key, const rdv::Bytes&) override {
    Throw();
    last_key = key;
    return Status::Ok();
  }
  Result<rdv::Bytes> Get(const std::string& key, double) override {
    Throw();
    last_key = key;
    return rdv::Bytes{'h', 'i'};
  }
  Result<int64_t> Add(const std::string&, int64_t) override { return int64_t{0}; }
  Result<std::vector<bool>> Check(const std::vector<std::string>&) override {
    return std::vector<bool>{};
  }
  std::string local_address() const override { return "127.0.0.1"; }
  void Interrupt() override {}

 private:
  void Throw() const {
    switch (mode) {
      case kOk: return;
      case kBadAlloc: throw std::bad_alloc();
      case kRuntime: throw std::runtime_error("the store broke");
      case kInt: throw 7;
    }
  }
};

struct Captured {
  std::vector<std::string> lines;
  static void Sink(int, const char* msg, void* user) {
    static_cast<Captured*>(user)->lines.push_back(msg);
  }
  bool Has(const std::string& text) const {
    for (const std::string& l : lines) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }
};

TEST(PluginEnv, KvCallbacksTurnExceptionsIntoStatuses) {
  static_assert(noexcept(PluginKvSet(nullptr, nullptr, nullptr, 0)), "kv_set must be noexcept");
  static_assert(noexcept(PluginKvGet(nullptr, nullptr, nullptr, nullptr, 0)),
                "kv_get must be noexcept");
  Captured cap;
  Logger log(HVD_LOG_WARNING, &Captured::Sink, &cap);
  ThrowingStore store;
  PluginKv kv;
  kv.client = &store;
  kv.prefix = "hvd/1/";
  kv.log = &log;

  // Working store: prefixed keys, the value handed over in malloc'd memory.
  EXPECT_EQ(PluginKvSet(&kv, "k", "v", 1), HVD_OK);
  EXPECT_EQ(store.last_key, "hvd/1/k");
  void* value = nullptr;
  size_t len = 0;
  ASSERT_EQ(PluginKvGet(&kv, "g", &value, &len, 1.0), HVD_OK);
  ASSERT_EQ(len, 2u);
  EXPECT_EQ(std::memcmp(value, "hi", 2), 0);
  PluginKvFree(value);
  EXPECT_TRUE(cap.lines.empty());

  struct Want {
    ThrowingStore::Mode mode;
    int status;
    const char* logged;
  };
  for (const Want& w : {Want{ThrowingStore::kBadAlloc, HVD_ERR_NO_MEMORY, "out of memory"},
                        Want{ThrowingStore::kRuntime, HVD_ERR_INTERNAL, "the store broke"},
                        Want{ThrowingStore::kInt, HVD_ERR_INTERNAL, "unknown exception"}}) {
    SCOPED_TRACE(w.logged);
    store.mode = w.mode;
    cap.lines.clear();
    EXPECT_EQ(PluginKvSet(&kv, "key1", "v", 1), w.status);
    EXPECT_TRUE(cap.Has("kv_set('key1') failed: " + std::string(w.logged)));
    value = reinterpret_cast<void*>(0x1);
    len = 99;
    EXPECT_EQ(PluginKvGet(&kv, "key2", &value, &len, 1.0), w.status);
    EXPECT_EQ(value, nullptr);
    EXPECT_EQ(len, 0u);
    EXPECT_TRUE(cap.Has("kv_get('key2') failed: " + std::string(w.logged)));
  }
  // Bad arguments: a status, not a crash.
  EXPECT_EQ(PluginKvSet(&kv, nullptr, "v", 1), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(PluginKvGet(&kv, "k", nullptr, &len, 1.0), HVD_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(PluginKvSet(nullptr, "k", "v", 1), HVD_ERR_INVALID_ARGUMENT);
}

void ThrowingSink(int, const char* msg, void*) {
  if (std::strstr(msg, "oom") != nullptr) throw std::bad_alloc();
  throw std::runtime_error("sink failed");
}

TEST(PluginEnv, PluginLogNeverThrows) {
  static_assert(noexcept(Logger::PluginLog(nullptr, 0, nullptr)), "log must be noexcept");
  Logger log(HVD_LOG_DEBUG, &ThrowingSink, nullptr);
  log.set_rank(3);
  testing::internal::CaptureStderr();
  EXPECT_NO_THROW(Logger::PluginLog(&log, HVD_LOG_WARNING, "plugin says oom"));
  EXPECT_NO_THROW(Logger::PluginLog(&log, HVD_LOG_ERROR, "plugin says hello"));
  const std::string err = testing::internal::GetCapturedStderr();
  // The lines still come out, on stderr, saying why.
  EXPECT_NE(err.find("[hvd 3] WARNING: plugin says oom (logging failed: out of memory)"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("[hvd 3] ERROR: plugin says hello (logging failed: sink failed)"),
            std::string::npos)
      << err;
  // Below the level, or nothing to say: nothing at all.
  Logger quiet(HVD_LOG_ERROR, &ThrowingSink, nullptr);
  testing::internal::CaptureStderr();
  Logger::PluginLog(&quiet, HVD_LOG_DEBUG, "x");
  Logger::PluginLog(&quiet, HVD_LOG_ERROR, nullptr);
  Logger::PluginLog(nullptr, HVD_LOG_ERROR, "x");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace hvd

namespace hvd {
namespace {

// Every entry the caps promise is checked at load; a smaller (older)
// struct_size leaves the newer entries absent.
TEST(TransportLoaderTable, TablesAreCheckedAndUsed) {
  TempDir dir;
  dir.CopyFake();
  Logger log;
  {
    ScopedEnv mode("FAKE_PLUGIN_MODE", "native");
    auto t = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_EQ(*(*t)->Query("abi"), HVD_TRANSPORT_ABI);
    EXPECT_TRUE((*t)->has_set_timeout());
    float buf[2] = {1, 2};
    EXPECT_TRUE((*t)->Allreduce(buf, 2, HVD_FLOAT32, HVD_SUM).ok());
    EXPECT_EQ((*t)->Choose(HVD_TRANSPORT_ALLREDUCE, 8), algo::Algorithm::kNative);
    EXPECT_TRUE((*t)->Barrier().ok());
  }
  struct Bad {
    const char* mode;
    const char* null_entry;
    const char* says;
  };
  const Bad bad[] = {{"p2p", "isend", "'isend' is NULL (caps: P2P)"},
                     {"p2p", "wait", "'wait' is NULL (caps: P2P)"},
                     {"native", "barrier", "'barrier' is NULL (no P2P in caps)"},
                     {"native", "init", "'init'"},
                     {"native", "set_timeout", "'set_timeout' is NULL (caps: PEER_TIMEOUT)"}};
  for (const Bad& b : bad) {
    ScopedEnv mode("FAKE_PLUGIN_MODE", b.mode), null_entry("FAKE_PLUGIN_NULL", b.null_entry);
    auto t = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
    ASSERT_FALSE(t.ok()) << b.null_entry;
    EXPECT_EQ(t.status().code(), HVD_ERR_VERSION);
    EXPECT_NE(t.status().message().find(b.says), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("hvd_transport_plugin"), std::string::npos);
  }
  {
    // An older, smaller table: set_timeout lies beyond its struct_size.
    ScopedEnv mode("FAKE_PLUGIN_MODE", "native"),
        size("FAKE_PLUGIN_SIZE", std::to_string(offsetof(hvd_transport_t, set_timeout)).c_str());
    auto t = Transport::Open("fake", dir.path(), OneRankEnv(), TransportOptions(), &log);
    ASSERT_TRUE(t.ok()) << t.status().message();
    EXPECT_FALSE((*t)->has_set_timeout());
  }
  {
    // A forced algorithm the transport cannot run fails at start, naming it.
    ScopedEnv mode("FAKE_PLUGIN_MODE", "native");
    TransportOptions o;
    o.algorithm[HVD_TRANSPORT_ALLREDUCE] = "ring";
    auto t = Transport::Open("fake", dir.path(), OneRankEnv(), o, &log);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("HVD_ALGORITHM_ALLREDUCE=ring"), std::string::npos)
        << t.status().message();
    EXPECT_NE(t.status().message().find("no point-to-point"), std::string::npos);
  }
}

}  // namespace
}  // namespace hvd

// Agreeing on the shared-memory path and mapping its segment (shm.h: Setup).
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <set>

#include "algorithms/shm/layout.h"
#include "algorithms/shm/shm.h"

namespace hvd {
namespace shm {

// ---------------------------------------------------------------------------
// Setup.

bool SwitchOn(const char* v) {
  if (v == nullptr || v[0] == '\0') return true;
  std::string s(v);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return !(s == "0" || s == "false" || s == "off" || s == "no");
}

std::string HostIdentity() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  if (!std::getline(f, boot) || boot.empty()) return "";
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) return "";
  struct stat ipc, pid;
  if (stat("/proc/self/ns/ipc", &ipc) != 0 || stat("/proc/self/ns/pid", &pid) != 0) return "";
  return "boot=" + boot + " host=" + host + " ipc=" + std::to_string(ipc.st_ino) +
         " pid=" + std::to_string(pid.st_ino);
}

std::string CpuList() {
  std::string out;
  auto add = [&out](long cpu) { out += (out.empty() ? "" : ",") + std::to_string(cpu); };
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) add(c);
    }
  }
  if (out.empty()) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < std::max(n, 1L); ++c) add(c);
  }
  return out;
}

size_t DistinctCpus(const std::vector<std::string>& lists) {
  std::set<unsigned long> cpus;
  for (const std::string& l : lists) {
    for (size_t at = 0; at < l.size();) {
      const size_t end = std::min(l.find(',', at), l.size());
      const std::string item = l.substr(at, end - at);
      if (!item.empty() && item.find_first_not_of("0123456789") == std::string::npos) {
        cpus.insert(std::strtoul(item.c_str(), nullptr, 10));
      }
      at = end + 1;
    }
  }
  return cpus.size();
}

namespace {

std::string ErrnoText(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

// Unlinks the segment's name when it goes out of scope (the creator's, once
// every rank has opened it or given up).
struct Name {
  std::string name;
  bool created = false;
  ~Name() {
    if (created) shm_unlink(name.c_str());
  }
};


// Why the path is not used ("" if every rank can use it), decided from the
// exchanged values only (this rank's own included), so every rank reaches
// the same answer.
std::string WhyNot(const std::vector<std::string>& all, const Options& o) {
  for (size_t j = 0; j < all.size(); ++j) {
    const std::string& v = all[j];
    if (v == "off") return "rank " + std::to_string(j) + " set " + o.switch_name + "=0";
    if (v.rfind("unknown", 0) == 0) return "rank " + std::to_string(j) + " cannot tell its host identity";
    if (v != all[0]) {
      return "ranks 0 and " + std::to_string(j) + " are on different hosts (or containers)";
    }
  }
  return "";
}

// Maps bytes of fd as the segment; *fail says why not.
void Map(int fd, size_t bytes, const Options& o, size_t slot, std::unique_ptr<Segment>* seg,
         std::string* fail) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    *fail = ErrnoText("mmap", errno);
    return;
  }
  *seg = std::make_unique<Segment>(base, bytes, o, slot);
}

// Rank 0: creates the segment under a random name, maps and initialises
// it; returns what it sends round (the name, or "!" and its failure).
std::string Create(const Options& o, size_t bytes, size_t slot, Name* name,
                   std::unique_ptr<Segment>* seg) {
  std::string fail;
  uint8_t rnd[16];
  if (getrandom(rnd, sizeof(rnd), 0) != static_cast<ssize_t>(sizeof(rnd))) {
    fail = ErrnoText("getrandom", errno);
  } else {
    char hex[2 * sizeof(rnd) + 1];
    for (size_t i = 0; i < sizeof(rnd); ++i) std::snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    name->name = std::string(o.name_prefix) + hex;
    const int fd = shm_open(name->name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      fail = ErrnoText("shm_open", errno);
    } else {
      name->created = true;
      // Allocates the pages now: a full /dev/shm fails here, not as SIGBUS later.
      const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (e != 0) {
        fail = "cannot allocate " + std::to_string(bytes >> 20) + " MiB in /dev/shm: " +
               std::strerror(e);
      } else {
        Map(fd, bytes, o, slot, seg, &fail);
      }
      close(fd);
    }
  }
  if (*seg) {
    auto* h = new ((*seg)->header()) Header();
    h->slot_bytes = slot;
    h->size = static_cast<uint32_t>(o.size);
    h->abort_by.store(0);
    for (int j = 0; j < o.size; ++j) new ((*seg)->line(j)) RankLine();
    h->magic = kMagic;
  }
  return fail.empty() ? name->name : "!" + fail;
}

// Other ranks: opens the segment rank 0 named in v (or its "!" failure);
// returns this rank's failure ("" if none).
std::string Open(const std::string& v, const Options& o, size_t bytes, size_t slot,
                 std::unique_ptr<Segment>* seg) {
  if (v.empty() || v[0] == '!') {
    return "rank 0 could not create the segment: " + (v.empty() ? std::string() : v.substr(1));
  }
  std::string fail;
  const int fd = shm_open(v.c_str(), O_RDWR | O_CLOEXEC, 0);
  struct stat sb;
  if (fd < 0) {
    fail = ErrnoText("shm_open", errno);
  } else if (fstat(fd, &sb) != 0 || static_cast<size_t>(sb.st_size) != bytes) {
    fail = "segment " + v + " has an unexpected size";
  } else {
    Map(fd, bytes, o, slot, seg, &fail);
  }
  if (fd >= 0) close(fd);
  const Header* h = *seg ? (*seg)->header() : nullptr;
  if (h != nullptr && (h->magic != kMagic || h->size != uint32_t(o.size) || h->slot_bytes != slot)) {
    fail = "segment " + v + " has a different layout (mixed hvd versions?)";
    seg->reset();
  }
  return fail;
}

}  // namespace

// Rank 0 creates the segment under a random name it sends round; everyone
// maps it and reports ok or its failure; everyone reads every answer, so all
// ranks decide alike; rank 0 then unlinks the name. An exchange failure
// returns its status; any other failure leaves *out null on every rank, logged.
Status Setup(Exchange& ex, const Options& o, std::unique_ptr<Segment>* out) {
  out->reset();
  const int r = o.rank;
  const int n = o.size;
  const std::string me = std::string(o.transport) + ": rank " + std::to_string(r) + ": ";
  auto log = [&](int level, const std::string& msg) {
    if (o.log) o.log(level, me + msg);
  };
  std::string id = !o.enabled ? "off" : o.identity.empty() ? HostIdentity() : o.identity;
  if (id.empty()) id = "unknown rank " + std::to_string(r);  // matches nobody
  std::vector<std::string> all;
  HVD_CHECK(ex.Allgather("host", id, &all));
  if (all.size() != static_cast<size_t>(n)) {
    return Error(HVD_ERR_INTERNAL, "shm setup: the exchange returned " + std::to_string(all.size()) +
                                       " strings for " + std::to_string(n) + " ranks");
  }
  const std::string why_not = WhyNot(all, o);
  if (!why_not.empty()) {
    log(HVD_LOG_INFO, "shared-memory path not used: " + why_not);
    return Status::Ok();
  }
  const size_t slot_pref = o.slot_bytes / 4096 * 4096 > 0 ? o.slot_bytes / 4096 * 4096 : 4096;
  const size_t slot = std::max(
      std::min(slot_pref, kSegmentBudget / (kSets * static_cast<size_t>(n)) / 4096 * 4096),
      std::min(slot_pref, kMinSlotBytes));
  const size_t bytes = Segment::SegmentBytes(n, slot);
  std::unique_ptr<Segment> seg;
  Name name;
  const std::string sent = r == 0 ? Create(o, bytes, slot, &name, &seg) : std::string();
  std::string fail = sent.rfind('!', 0) == 0 ? sent.substr(1) : std::string();  // this rank's failure
  HVD_CHECK(ex.Allgather("name", sent, &all));
  if (r != 0) fail = Open(all.empty() ? std::string() : all[0], o, bytes, slot, &seg);
  if (seg) seg->set_owner(static_cast<int32_t>(getpid()));
  HVD_CHECK(ex.Allgather("ok", fail.empty() ? "ok" : fail, &all));
  std::string first_fail;  // again from the exchanged values only
  for (int j = 0; j < n && j < static_cast<int>(all.size()); ++j) {
    if (all[j] != "ok" && first_fail.empty()) first_fail = "rank " + std::to_string(j) + ": " + all[j];
  }
  if (all.size() != static_cast<size_t>(n) && first_fail.empty()) first_fail = "incomplete answers";
  if (!first_fail.empty()) {
    log(HVD_LOG_WARNING,
        std::string("shared-memory setup failed, using ") + o.fallback + ": " + first_fail);
    return Status::Ok();
  }
  // Ranks bound one to a CPU each spin; more ranks than the CPUs they may
  // run on together yield at once (Segment::set_spin).
  HVD_CHECK(ex.Allgather("cpus", CpuList(), &all));
  const size_t cpus = DistinctCpus(all);
  const bool crowded = cpus < static_cast<size_t>(n);
  if (crowded) seg->set_spin(0);
  log(HVD_LOG_INFO, "shared-memory path active (" + std::to_string(n) + " ranks, " +
                        (bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB"
                                                    : std::to_string(bytes >> 10) + " KiB") +
                        " segment, " + std::to_string(slot >> 10) + " KiB slots" +
                        (crowded ? ", " + std::to_string(cpus) + " CPUs: waits yield at once" : "") +
                        ")");
  *out = std::move(seg);
  return Status::Ok();
}

}  // namespace shm
}  // namespace hvd

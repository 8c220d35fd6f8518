// hvdrun --help, generated from the table of options (option_table.cc) with
// an introduction before it and the variables every rank gets after it.
#include <string>

#include "launcher/option_table.h"
#include "launcher/options.h"

namespace hvd::launcher {
namespace {

constexpr const char* kIntro = R"(usage: hvdrun [options] [--] command [args...]

Starts N copies of command as the ranks of one hvd job, on this machine and/or
on remote hosts over ssh, hosts the job's rendezvous store, forwards every
rank's output, and stops the whole job as soon as one rank fails.
)";

constexpr const char* kOutro = R"(
Every rank gets HVD_RANK, HVD_SIZE, HVD_LOCAL_RANK, HVD_LOCAL_SIZE,
HVD_CROSS_RANK, HVD_CROSS_SIZE, HVD_RENDEZVOUS_ADDR, HVD_SECRET, HVD_HOSTNAME;
the same under Horovod's names: HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK,
HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE, HOROVOD_HOSTNAME
(not with --transport mpi: mpirun starts those ranks); and RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE.

horovodrun's flags above keep their meaning, so a launch script works with
hvdrun in its place; see docs/horovod.md for the ones hvdrun refuses.

Elastic workers get HVD_ELASTIC=1, HVD_ELASTIC_WORKER, HVD_ELASTIC_TIMEOUT,
HVD_RENDEZVOUS_ADDR, HVD_SECRET, HVD_HOSTNAME and no rank variables: their
ranks come from hvdrun with every epoch.

Exit status: 0 when every rank exits 0; the first failing rank's exit code
(128+signal when it was killed by a signal); 128+signal when hvdrun itself
is interrupted; 1 when a rank did not connect within the start timeout or the
launcher could not start the job; 2 for usage errors. Elastic: 0 when every
worker of the last epoch exits 0, else the first failed one's code; 1 when
fewer than --min-np workers remain or the reset limit is reached.
)";

constexpr size_t kHelpColumn = 30;  // where every explanation starts

// "  -np, --num-proc N           number of ranks ...", one explanation line
// after another at kHelpColumn; a label too long for its column gets a line
// of its own.
std::string FormatRow(const OptionRow& row) {
  std::string label = std::string("  ") + row.names;
  if (*row.metavar != '\0') label += std::string(" ") + row.metavar;
  std::string out = label;
  const std::string indent(kHelpColumn, ' ');
  if (label.size() + 2 <= kHelpColumn) {
    out.append(kHelpColumn - label.size(), ' ');
  } else {
    out += "\n" + indent;
  }
  for (const char* p = row.help; *p != '\0'; ++p) {
    out += *p;
    if (*p == '\n') out += indent;
  }
  return out + "\n";
}

}  // namespace

std::string UsageText() {
  std::string text = kIntro;
  size_t count = 0;
  const OptionRow* rows = OptionRows(&count);
  const char* section = nullptr;
  for (size_t i = 0; i < count; ++i) {
    if (section == nullptr || std::string(section) != rows[i].section) {
      section = rows[i].section;
      text += std::string("\n") + section + "\n";
    }
    text += FormatRow(rows[i]);
  }
  return text + kOutro;
}

}  // namespace hvd::launcher

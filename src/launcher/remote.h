// Starting a rank on a remote host through ssh.
//
// hvdrun runs, for every remote rank:
//     ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR [-p P] [-i F]
//         -- host "exec sh -c '<script>'"
// with ssh's standard input a pipe that hvdrun keeps open for the life of the
// job. hvdrun writes the job secret as the first line on that pipe (so it never
// appears on a command line, where `ps` would show it), then only a line
// "usr1" when it asks the rank for its flight record (flight_records.h). The
// script reads the secret, cd's to hvdrun's working directory, starts the
// command in a session of its own (setsid, where available), and watches its
// standard input: when ssh goes away (hvdrun stopped the job, hvdrun died, the
// connection broke) the remote sshd closes that input, and the watcher sends
// SIGTERM to the command's process group, then SIGKILL after the grace period.
// So no -tt (a pseudo-terminal would mangle output and signals) is needed for
// remote ranks to die with their ssh client.
//
// The script's very first step writes kRemoteStartMarker as a line on its
// standard error: ssh carries it to hvdrun once the login is complete and
// the script runs. So at the start timeout hvdrun tells a login that never
// completed (authentication hangs: an authorized-keys, PAM or LDAP lookup
// that does not answer) from a rank that started but never reached the
// store. hvdrun takes the line out of the rank's stderr (StartMarkerFilter)
// before anything else sees it.
//
// With --bind-to core or auto the script starts the command through this
// hvdrun's own program on the remote host (the same path: hvd installed
// alike on every host), as `hvdrun --bind-exec ... -- command` (cpu_binding.h),
// which binds the rank to its share of that host's CPUs and execs it. Where
// that program is missing there, the rank runs unbound (said with -v).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "launcher/cpu_binding.h"

namespace hvd::launcher {

// The remote script's first line on its stderr (a word: no quoting needed).
inline constexpr char kRemoteStartMarker[] = "hvdrun:remote-started";

// Takes the start marker out of a remote child's stderr as it is read. Until
// the marker has come, a line that is exactly the marker is dropped (the
// first one only); the lines before it (ssh's own messages, what a login
// shell prints) pass unchanged, and a partial line that may yet become the
// marker is held back until its end comes. Once the marker has come, every
// byte passes straight through.
class StartMarkerFilter {
 public:
  // Appends to *out the bytes of data to forward; true when the marker came
  // in this call.
  bool Feed(const char* data, size_t n, std::string* out);
  // End of the stream: appends what is held back.
  void Finish(std::string* out);
  bool seen() const { return seen_; }

 private:
  bool seen_ = false;
  bool line_start_ = true;  // the next byte starts a line
  std::string held_;        // a line's start that is a prefix of the marker
};

// The start timeout's verdict on ranks whose ssh never brought the marker:
// "ssh to host H did not complete the login (authentication) within T s"
// and what to check. timeout: as given ("10").
std::string LoginNotCompleted(const std::string& host, int port, const std::string& timeout);

// Quotes s for a POSIX shell: 'it'\''s'.
std::string ShellQuote(const std::string& s);

struct RemoteSpec {
  std::string host;
  int port = 0;                        // 0: ssh's default
  std::string identity;                // "": ssh's default keys
  std::string ssh_program = "ssh";
  std::vector<std::string> extra_args;  // inserted before the host
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;  // set for the command
  std::vector<std::string> command;
  double grace_s = 5;
  // The start timeout: ssh gets half of it (at least 1 s) as its
  // ConnectTimeout (TCP connect and sshd's banner); 0: ssh's default.
  double connect_timeout_s = 0;
  // > 0: ssh probes the connection this often and gives up (exits 255) after
  // 3 probes unanswered, so a host cut off ends its worker's ssh client
  // within about 3 intervals; 0: ssh's default (no probes).
  int alive_interval_s = 0;
  // --bind-to on the remote host: bind_program (this hvdrun's path) runs
  // there as `bind_program --bind-exec ...` with bind (its command left
  // empty: the command above goes in); "" : not bound.
  std::string bind_program;
  BindExecArgs bind;
};

// The shell script run on the remote host (see above). It expects the secret
// as the first line of its standard input and exports it as HVD_SECRET.
std::string RemoteScript(const RemoteSpec& spec);

// The ssh client's argv.
std::vector<std::string> SshArgv(const RemoteSpec& spec);

}  // namespace hvd::launcher

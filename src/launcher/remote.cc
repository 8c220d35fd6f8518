#include "launcher/remote.h"

#include <algorithm>
#include <cmath>

namespace hvd::launcher {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += "'";
  return out;
}

bool StartMarkerFilter::Feed(const char* data, size_t n, std::string* out) {
  if (seen_) {
    out->append(data, n);
    return false;
  }
  static const std::string marker = kRemoteStartMarker;
  for (size_t i = 0; i < n; ++i) {
    char c = data[i];
    if (!line_start_) {
      // The middle of a line that is not the marker: it passes.
      size_t end = i;
      while (end < n && data[end] != '\n') ++end;
      out->append(data + i, end - i);
      if (end == n) return false;
      out->push_back('\n');
      line_start_ = true;
      i = end;
      continue;
    }
    if (c == '\n' && held_ == marker) {
      held_.clear();
      seen_ = true;
      out->append(data + i + 1, n - i - 1);
      return true;
    }
    held_.push_back(c);
    if (c == '\n' || marker.compare(0, held_.size(), held_) != 0) {
      // Not the marker after all.
      out->append(held_);
      line_start_ = c == '\n';
      held_.clear();
    }
  }
  return false;
}

void StartMarkerFilter::Finish(std::string* out) {
  out->append(held_);
  held_.clear();
}

std::string LoginNotCompleted(const std::string& host, int port, const std::string& timeout) {
  const std::string p = port > 0 ? " -p " + std::to_string(port) : std::string();
  return "ssh to host " + host + " did not complete the login (authentication) within " + timeout +
         " s: the remote command never started there. Check that this user's key is accepted "
         "there without a prompt, and the lookups of that login on " + host +
         " (authorized keys, PAM, LDAP/NSS; its shell's startup files); try 'ssh -v" + p + " " +
         host + " true'";
}

std::string RemoteScript(const RemoteSpec& spec) {
  // "--" first: env takes no option from what follows (the assignments and
  // then the command, even one starting with '-').
  std::string cmd = "env --";
  for (const auto& kv : spec.env) cmd += " " + ShellQuote(kv.first + "=" + kv.second);
  // With a binding: the positional parameters, set below to the binding
  // program's words (or to none, where that program is missing).
  if (!spec.bind_program.empty()) cmd += " \"$@\"";
  for (const auto& a : spec.command) cmd += " " + ShellQuote(a);

  long grace = std::lround(std::ceil(spec.grace_s));
  // One line, steps joined with "; " (or ended by "&"), so that any login
  // shell passes it to sh intact.
  std::vector<std::string> steps = {
      // First of all: the login is complete and this script runs.
      std::string("echo ") + kRemoteStartMarker + " >&2",
      // fd 3 = the pipe from hvdrun; fd 0 = /dev/null for the command.
      "exec 3<&0 </dev/null",
      "IFS= read -r HVD_SECRET <&3 || exit 1",
      "export HVD_SECRET",
      "cd " + ShellQuote(spec.cwd) + " || { echo \"hvdrun: cannot cd to \"" +
          ShellQuote(spec.cwd) + "\" on $(uname -n)\" >&2; exit 1; }",
  };
  if (!spec.bind_program.empty()) {
    BindExecArgs b = spec.bind;
    b.command.clear();  // the command follows "$@" in cmd
    std::string words;
    for (const auto& w : BindExecArgv(spec.bind_program, b)) words += " " + ShellQuote(w);
    std::string missing = ":";
    if (b.verbose) {
      missing = "echo " +
                ShellQuote(std::string("hvdrun: --bind-to ") + BindModeName(b.mode) + ": " + b.who +
                           " is not bound: no " + spec.bind_program + " on host " + spec.host) +
                " >&2";
    }
    steps.push_back("if [ -x " + ShellQuote(spec.bind_program) + " ]; then set --" + words +
                    "; else set --; " + missing + "; fi");
  }
  const std::vector<std::string> rest = {
      "if command -v setsid >/dev/null 2>&1; then setsid " + cmd + " 3<&- & else " + cmd +
          " 3<&- & fi",
      "hvd_pid=$!",
      // The watcher: a line "usr1" from hvdrun asks the rank for its flight
      // record (SIGUSR1, then SIGCONT so that a stopped rank answers once it
      // runs; the rank itself, as for a local one). EOF on fd 3 means ssh is
      // gone. Then SIGTERM to the command's group, and SIGKILL once the
      // grace period is over if the group still exists. It sleeps in 1 s
      // steps, so when it is killed below, what it leaves behind is at most
      // a 1 s sleep.
      "{ while IFS= read -r hvd_line; do [ \"$hvd_line\" = usr1 ] && "
      "kill -USR1 $hvd_pid && kill -CONT $hvd_pid; done 2>/dev/null; "
      "kill -TERM -$hvd_pid $hvd_pid 2>/dev/null; "
      "hvd_i=0; while [ $hvd_i -lt " + std::to_string(grace) +
          " ] && { kill -0 -$hvd_pid || kill -0 $hvd_pid; } 2>/dev/null; do sleep 1; hvd_i=$((hvd_i+1)); done; "
          "kill -KILL -$hvd_pid $hvd_pid 2>/dev/null; } <&3 >/dev/null 2>&1 & hvd_watch=$!",
      // From here on this shell writes nothing: with ssh gone its stderr is a
      // broken pipe, and a "Terminated" notice from wait would kill it with
      // SIGPIPE before it could clean up.
      "exec 3<&- 2>/dev/null",
      "wait $hvd_pid",
      "hvd_rc=$?",
      "kill $hvd_watch",
      "wait $hvd_watch",
      "exit $hvd_rc",
  };
  steps.insert(steps.end(), rest.begin(), rest.end());
  std::string s;
  for (size_t i = 0; i < steps.size(); ++i) s += (i ? "; " : "") + steps[i];
  return s;
}

std::vector<std::string> SshArgv(const RemoteSpec& spec) {
  // LogLevel=ERROR: no "Permanently added ... to the list of known hosts"
  // line per rank; errors (refused keys, unreachable hosts) still show.
  std::vector<std::string> argv = {spec.ssh_program, "-o", "BatchMode=yes", "-o",
                                   "StrictHostKeyChecking=accept-new", "-o", "LogLevel=ERROR"};
  if (spec.connect_timeout_s > 0) {
    // Half the start timeout (at least 1 s) to connect and read sshd's
    // banner: a host that does not answer, or whose sshd accepts but never
    // speaks (hung), fails ssh itself, which says so (exit 255), before the
    // start timeout would report the rank as not reaching the store. (It
    // does not cover what follows the banner: a login that hangs there is
    // told at the start timeout by the missing start marker.)
    argv.push_back("-o");
    argv.push_back("ConnectTimeout=" +
                   std::to_string(std::max(1L, std::lround(std::ceil(spec.connect_timeout_s / 2)))));
  }
  if (spec.alive_interval_s > 0) {
    argv.push_back("-o");
    argv.push_back("ServerAliveInterval=" + std::to_string(spec.alive_interval_s));
    argv.push_back("-o");
    argv.push_back("ServerAliveCountMax=3");
  }
  if (spec.port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(spec.port));
  }
  if (!spec.identity.empty()) {
    argv.push_back("-i");
    argv.push_back(spec.identity);
  }
  for (const auto& a : spec.extra_args) argv.push_back(a);
  argv.push_back("--");  // the host can never be taken for an option
  argv.push_back(spec.host);
  argv.push_back("exec sh -c " + ShellQuote(RemoteScript(spec)));
  return argv;
}

}  // namespace hvd::launcher

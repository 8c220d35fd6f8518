// A scriptable stand-in for hvdrun's elastic driver (docs/elastic.md,
// "Protocol between workers and hvdrun"), for tests that start elastic
// workers themselves (the Java and Julia bindings' tests).
//
// It hosts the rendezvous store on 127.0.0.1 and prints one line
//     store 127.0.0.1:<port> <secret>
// then reads commands on stdin, one per line, and answers each with one line:
//     waitjoin <worker> <n> <timeout_s>  -> "joined <host>" | "timeout"
//     answer <worker> <n> <text...>      -> "ok"   (sets elastic/assign/<worker>/<n>)
//     set <key> <value...>               -> "ok"
//     get <key>                          -> "value <v>" | "none"
//     quit                               -> "bye", and exits
// Anything else answers "error <why>". It exits when stdin closes, so a test
// that dies takes it along.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "rendezvous/store.h"

namespace {

using hvd::rdv::Bytes;

std::string Rest(std::istringstream& in) {
  std::string rest;
  std::getline(in, rest);
  const size_t b = rest.find_first_not_of(' ');
  return b == std::string::npos ? std::string() : rest.substr(b);
}

void Say(const std::string& s) {
  std::cout << s << std::endl;  // flushed: the test reads line by line
}

}  // namespace

int main() {
  const std::string secret = hvd::rdv::NewSecret();
  auto started = hvd::rdv::StoreServer::Start("127.0.0.1", 0, secret);
  if (!started.ok()) {
    std::fprintf(stderr, "hvd_fake_elastic_launcher: %s\n", started.status().message().c_str());
    return 1;
  }
  std::unique_ptr<hvd::rdv::StoreServer> server = std::move(started).value();
  Say("store 127.0.0.1:" + std::to_string(server->port()) + " " + secret);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd.empty()) continue;
    if (cmd == "waitjoin") {
      std::string worker;
      long long n = -1;
      double timeout_s = -1;
      in >> worker >> n >> timeout_s;
      if (worker.empty() || n < 0 || !(timeout_s >= 0)) {
        Say("error usage: waitjoin <worker> <n> <timeout_s>");
        continue;
      }
      const std::string key = "elastic/join/" + worker + "/" + std::to_string(n);
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
      Bytes v;
      bool got = false;
      for (;;) {
        if (server->TryGet(key, &v)) {
          got = true;
          break;
        }
        if (std::chrono::steady_clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      Say(got ? "joined " + std::string(v.begin(), v.end()) : "timeout");
    } else if (cmd == "answer") {
      std::string worker;
      long long n = -1;
      in >> worker >> n;
      const std::string text = Rest(in);
      if (worker.empty() || n < 0 || text.empty()) {
        Say("error usage: answer <worker> <n> <text>");
        continue;
      }
      server->Set("elastic/assign/" + worker + "/" + std::to_string(n), Bytes(text.begin(), text.end()));
      Say("ok");
    } else if (cmd == "set") {
      std::string key;
      in >> key;
      const std::string value = Rest(in);
      if (key.empty()) {
        Say("error usage: set <key> <value>");
        continue;
      }
      server->Set(key, Bytes(value.begin(), value.end()));
      Say("ok");
    } else if (cmd == "get") {
      std::string key;
      in >> key;
      Bytes v;
      Say(!key.empty() && server->TryGet(key, &v) ? "value " + std::string(v.begin(), v.end()) : "none");
    } else if (cmd == "quit") {
      Say("bye");
      return 0;
    } else {
      Say("error unknown command '" + cmd + "'");
    }
  }
  return 0;
}

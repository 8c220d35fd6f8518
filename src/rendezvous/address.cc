// Addresses for the rendezvous store: a socket's own address, the address
// to serve a host name on, host:port parsing.

#include "rendezvous/address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rendezvous/socket.h"
#include "rendezvous/store.h"

namespace hvd::rdv {

namespace internal {
// True when a connected TCP socket's local and peer addresses are the same.
bool ConnectedToItself(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof(local), pl = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
    return false;
  }
  return ll == pl && std::memcmp(&local, &peer, ll) == 0;
}
}  // namespace internal

namespace detail {

std::string NumericAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) return "";
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    if (!::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf))) return "";
  } else if (ss.ss_family == AF_INET6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
      if (!::inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], buf, sizeof(buf))) return "";
    } else if (!::inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf))) {
      return "";
    }
  }
  return buf;
}

}  // namespace detail

using detail::ErrnoText;
using detail::Fd;

std::string OwnAddressOf(const std::string& host_in, bool allow_loopback, std::string* why) {
  std::string host = host_in;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    *why = "cannot resolve " + host + ": " + (rc == EAI_SYSTEM ? ErrnoText(errno) : ::gai_strerror(rc));
    return "";
  }
  std::string found, loopback;
  for (addrinfo* ai = res; ai != nullptr && found.empty(); ai = ai->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {0};
    bool is_loopback = false;
    if (ai->ai_family == AF_INET) {
      auto* sin = reinterpret_cast<sockaddr_in*>(ai->ai_addr);
      is_loopback = (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
      if (!::inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf))) continue;
    } else if (ai->ai_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      is_loopback = IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
      if (!::inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf))) continue;
    } else {
      continue;
    }
    if (is_loopback && !allow_loopback) {
      loopback = buf;
      continue;
    }
    // Ours if a socket can bind to it (port 0: any free port, released at once).
    Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) continue;
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) found = buf;
  }
  ::freeaddrinfo(res);
  if (found.empty()) {
    *why = !loopback.empty() ? host + " resolves here to the loopback address " + loopback +
                                   ", which other hosts cannot reach"
                             : host + " is not an address of this host";
  }
  return found;
}

Status ParseHostPort(const std::string& s, std::string* host, int* port) {
  std::string h, p;
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos) return InvalidArgument("'" + s + "': missing ']' after an IPv6 address");
    h = s.substr(1, close - 1);
    if (close + 1 >= s.size() || s[close + 1] != ':') {
      return InvalidArgument("'" + s + "': missing ':port' after the bracketed address");
    }
    p = s.substr(close + 2);
  } else {
    size_t colon = s.rfind(':');
    if (colon == std::string::npos) return InvalidArgument("'" + s + "': expected host:port, the port is missing");
    h = s.substr(0, colon);
    p = s.substr(colon + 1);
    if (h.find(':') != std::string::npos) {
      return InvalidArgument("'" + s + "': an IPv6 address must be bracketed, as in [::1]:29500");
    }
  }
  if (h.empty()) return InvalidArgument("'" + s + "': the host is missing");
  if (p.empty()) return InvalidArgument("'" + s + "': the port is missing");
  if (p.size() > 5 || !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return InvalidArgument("'" + s + "': the port must be a number in 0..65535");
  }
  int value = std::stoi(p);  // at most 5 digits: cannot throw
  if (value > 65535) return InvalidArgument("'" + s + "': the port must be a number in 0..65535");
  *host = h;
  *port = value;
  return Status::Ok();
}

}  // namespace hvd::rdv

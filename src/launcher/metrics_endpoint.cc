#include "launcher/metrics_endpoint.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/prom_text.h"

namespace hvd::launcher {

Status MetricsEndpoint::Start(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string where = addr + ":" + std::to_string(port);
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) {
    return Error(HVD_ERR_INVALID_ARGUMENT, "--metrics-port: cannot resolve " + where);
  }
  std::string why;
  for (addrinfo* a = res; a != nullptr && fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) {
      sockaddr_storage sa{};
      socklen_t len = sizeof(sa);
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
      port_ = ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
      fd_ = fd;
    } else {
      why = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(res);
  if (fd_ < 0) return Error(HVD_ERR_INVALID_ARGUMENT, "--metrics-port: cannot listen on " + where + ": " + why);
  thread_ = std::thread([this] { Serve(); });
  return Status::Ok();
}

void MetricsEndpoint::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string MetricsEndpoint::Render() const {
  PromMerge merge;
  const int reporting = MergeReports(ranks_(), read_, &merge);
  return merge.Text() +
         "# HELP hvd_launcher_ranks_reporting ranks whose report the launcher holds\n"
         "# TYPE hvd_launcher_ranks_reporting gauge\nhvd_launcher_ranks_reporting " +
         std::to_string(reporting) + "\n";
}

void MetricsEndpoint::Serve() {
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    Answer(c);
    close(c);
  }
}

// One request per connection, read for at most 2 s (a client that sends
// nothing holds the endpoint no longer).
void MetricsEndpoint::Answer(int fd) const {
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos &&
         req.size() < 16384) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  const bool get = req.rfind("GET /metrics ", 0) == 0 || req.rfind("GET / ", 0) == 0 ||
                   req.rfind("GET /metrics?", 0) == 0;
  const std::string body = get ? Render() : "not found: GET /metrics\n";
  const std::string head = std::string(get ? "HTTP/1.0 200 OK" : "HTTP/1.0 404 Not Found") +
                           "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"
                           "\r\nContent-Length: " + std::to_string(body.size()) +
                           "\r\nConnection: close\r\n\r\n";
  const std::string all = head + body;
  size_t off = 0;
  while (off < all.size()) {
    const ssize_t n = send(fd, all.data() + off, all.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace hvd::launcher

#include "server/peer.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace tessera::server {

namespace {

// "1.2.3.4" or "::1" and the port of |a|; false for other families.
bool address_of(const sockaddr_storage& a, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    *port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    *port = ntohs(v6->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

}  // namespace

PeerWatch::PeerWatch(const std::string& remote_addr, int remote_port, int local_port)
    : remote_addr_(remote_addr), remote_port_(remote_port), local_port_(local_port) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < 0) continue;
    if (matches(int(fd))) {
      fd_ = int(fd);
      break;
    }
  }
  closedir(d);
}

bool PeerWatch::matches(int fd) const {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) return false;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) return false;
  std::string la, pa;
  int lp = 0, pp = 0;
  return address_of(local, &la, &lp) && address_of(peer, &pa, &pp) && lp == local_port_ && pp == remote_port_ &&
         pa == remote_addr_;
}

bool PeerWatch::closed() {
  if (fd_ < 0) return false;
  // NOTE: httplib closes the socket once the handler returns, and the number may then be reused;
  // while the handler waits it is ours, but re-check the addresses so a reused number never
  // makes us read someone else's connection.
  if (!matches(fd_)) return true;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  char c;
  return recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace tessera::server

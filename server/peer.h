// Whether the client of a request is still connected, for handlers that wait (a non-streaming
// completion): cpp-httplib 0.11 gives a handler no way to see its socket, so PeerWatch finds it
// by the connection's addresses among the process's open sockets.
#pragma once
#include <string>

namespace tessera::server {

class PeerWatch {
 public:
  // The socket connected from |remote_addr|:|remote_port| to local port |local_port|; inert
  // (closed() always false) when none is found.
  PeerWatch(const std::string& remote_addr, int remote_port, int local_port);
  // True once the client has closed the connection (EOF or an error on the socket). A socket
  // with unread data (a pipelined next request) counts as open. Cheap: one poll, no blocking.
  bool closed();

 private:
  bool matches(int fd) const;
  std::string remote_addr_;
  int remote_port_, local_port_;
  int fd_ = -1;
};

}  // namespace tessera::server

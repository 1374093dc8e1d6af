// HTTP setup: the httplib server, a worker thread per connection up to a bound, and a stream of
// our own under httplib's request parser that holds every read to a deadline.
//
// cpp-httplib 0.11 bounds only each single read (a client sending a byte every few seconds
// never trips it), queues accepted sockets without limit, listens with a backlog of 5 and sets
// SO_REUSEPORT (two servers then share a port). HttpServer fixes each of these around it:
// - every connection (Connection) has a phase: awaiting a request (headers due within
//   header_timeout_s), reading the body (due within body_timeout_s) or being handled; its
//   reads fail at the deadline, which ends the connection and frees its worker;
// - at most max_connections are served at once; more are answered 503 and closed at accept;
// - the listening socket gets SO_REUSEADDR only, and listen_backlog.
// Handlers learn about their own connection (client_gone()) from the thread they run on.
#pragma once
#include <atomic>
#include <chrono>

#include <httplib.h>

#include "core/status.h"
#include "server/options.h"

namespace tessera::server {

enum class Phase {
  kAwaitingRequest,  // the request line and headers are due (the first, or the next keep-alive one)
  kReadingBody,      // headers read; the body is due
  kHandling,         // in a handler, or writing its response: no read deadline
};

// One accepted socket, served by one worker thread (only that thread touches it).
struct Connection {
  int fd = -1;
  Phase phase = Phase::kAwaitingRequest;
  std::chrono::steady_clock::time_point deadline;  // for reads in the two reading phases
  bool probed = false;  // client_gone() wrote its probe after the client's read side closed
  bool close_after_response = false;
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const ServeOptions& opts);
  // Binds opts.host:opts.port (not yet accepting); the bound port (the chosen one for port 0) in
  // |port|. A port in use is Unavailable "address already in use".
  Status bind(int* port);
  // Stops accepting (the listening socket is shut down; listen_after_bind returns once every
  // connection has ended) while responses in flight, streams included, keep going. Connections
  // waiting for a request are closed. Safe from any thread.
  void stop_accepting();

 private:
  // Serves the requests of one connection (keep-alive), with reads held to the deadlines.
  bool process_and_close_socket(socket_t sock) override;

  ServeOptions opts_;
  std::atomic<bool> stopping_{false};
};

// The phase of the connection the calling thread serves (a no-op off the server's workers).
void set_connection_phase(Phase phase);

// Ends the calling thread's connection after this response (one answered before its body was
// read: the unread body must not be parsed as a next request).
void close_after_response();

// For a handler that writes nothing until it is done (a non-streaming completion): whether its
// client has gone away. Cheap (one poll). A client that only half-closed (shut its sending
// side, still reading) is not gone: when the read side ends, one harmless interim response
// ("100 Continue", which HTTP/1.1 clients must accept before the final one) is written, and a
// client that closed entirely answers it with a reset, seen at the next call.
bool client_gone();

}  // namespace tessera::server

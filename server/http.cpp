#include "server/http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::server {

namespace {

using Clock = std::chrono::steady_clock;

thread_local Connection* t_connection = nullptr;    // the connection this worker serves
thread_local const ServeOptions* t_options = nullptr;  // and its server's options
thread_local bool t_reject = false;               // set while a connection over the bound is refused

constexpr int kMaxRequestsPerConnection = 1000;

Clock::duration seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

// One worker thread per connection, up to |max| at once; a connection beyond that is refused on
// the accepting thread (process_and_close_socket sees t_reject), so nothing ever waits in a
// queue behind slow clients. Threads are made as needed and kept.
class ConnectionPool : public httplib::TaskQueue {
 public:
  explicit ConnectionPool(int max) : max_(size_t(max)) {}
  ~ConnectionPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (jobs_.size() + busy_ < max_) {
        jobs_.push_back(std::move(fn));
        if (jobs_.size() > idle_) threads_.emplace_back([this] { work(); });  // no idle worker left for it
        cv_.notify_one();
        return;
      }
    }
    t_reject = true;
    fn();
    t_reject = false;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // stopping, nothing left
      auto fn = std::move(jobs_.front());
      jobs_.pop_front();
      ++busy_;
      lock.unlock();
      fn();
      lock.lock();
      --busy_;
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0, busy_ = 0;
  bool stop_ = false;
};

// Whether |host|:|port| can be bound, checked with a socket of our own: httplib reports only
// failure, and the cause (a port in use) is what the user needs to read.
Status check_bindable(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string where = host + ":" + std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return Unavailable("cannot listen on " + where + ": " + gai_strerror(rc));
  int err = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) { err = errno; continue; }
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    const bool bound = ::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
    err = bound ? 0 : errno;
    ::close(fd);
    if (bound) break;
  }
  freeaddrinfo(res);
  if (err == EADDRINUSE)
    return Unavailable("cannot listen on " + where + ": address already in use (another process holds the port; choose another with --port)");
  if (err != 0) return Unavailable("cannot listen on " + where + ": " + std::strerror(err));
  return OkStatus();
}

// The 503 a connection beyond max_connections gets before it is closed.
void refuse(int sock, int max_connections) {
  const std::string body = R"({"error":{"message":"the server is serving its maximum of )" + std::to_string(max_connections) +
                           R"( connections; retry later","type":"server_error","param":null,"code":"too_many_connections"}})";
  const std::string head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                           "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  const std::string all = head + body;
  (void)::send(sock, all.data(), all.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}


// How long a response write may wait for a client that does not read (a stalled stream).
constexpr double kWriteTimeoutS = 60;

// "1.2.3.4" or "::1" and the port of |a| ("" and -1 for other families).
void address_of(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  ip.clear();
  port = -1;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    port = ntohs(v6->sin6_port);
  }
  ip = buf;
}

// The socket of one connection under httplib's request parser, buffered (the parser reads
// headers a byte at a time). Every read fails once the connection's phase deadline passes, or
// at once while the server stops and no request has begun.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(Connection& c, const std::atomic<bool>& stopping) : c_(c), stopping_(stopping) {}

  bool is_readable() const override { return pos_ < len_ || wait(POLLIN, remaining_read_ms()); }
  bool is_writable() const override { return wait(POLLOUT, int(kWriteTimeoutS * 1000)); }

  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == len_) {
      if (!wait_to_read()) return -1;
      const ssize_t n = ::recv(c_.fd, buf_, sizeof buf_, 0);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = size_t(n);
    }
    const size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (getpeername(c_.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_of(a, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (getsockname(c_.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) address_of(a, ip, port);
  }
  socket_t socket() const override { return c_.fd; }

  // Before a keep-alive request: whether one starts (bytes buffered or arriving before the
  // deadline, and the server not stopping).
  bool next_request() const { return buffered() || wait_to_read(); }

 private:
  bool buffered() const { return pos_ < len_; }
  int remaining_read_ms() const {
    if (c_.phase == Phase::kHandling) return int(kWriteTimeoutS * 1000);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(c_.deadline - Clock::now()).count();
    return int(std::max<int64_t>(left, 0));
  }
  // Waits for input in slices, so a deadline or a stop is seen within 100 ms.
  bool wait_to_read() const {
    for (;;) {
      if (stopping_ && c_.phase == Phase::kAwaitingRequest) return false;
      const int left = remaining_read_ms();
      if (left <= 0) return false;
      if (wait(POLLIN, std::min(left, 100))) return true;
    }
  }
  bool wait(short events, int timeout_ms) const {
    pollfd p{c_.fd, events, 0};
    int rc;
    while ((rc = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR) {
    }
    return rc > 0;
  }

  Connection& c_;
  const std::atomic<bool>& stopping_;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};
}  // namespace

// ---------------------------------------------------------------------------------------------
// HttpServer

HttpServer::HttpServer(const ServeOptions& opts) : opts_(opts) {
  const int max = opts.max_connections;
  new_task_queue = [max] { return new ConnectionPool(max); };
  // SO_REUSEADDR (a restart does not wait out TIME_WAIT) but not httplib's SO_REUSEPORT, with
  // which a second server would bind the same port and take half of its connections.
  set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  set_payload_max_length(opts.max_body_bytes);
}

Status HttpServer::bind(int* port) {
  if (opts_.port != 0) TS_RETURN_IF_ERROR(check_bindable(opts_.host, opts_.port));
  *port = opts_.port == 0 ? bind_to_any_port(opts_.host) : (bind_to_port(opts_.host, opts_.port) ? opts_.port : -1);
  if (*port < 0) return Unavailable("cannot listen on " + opts_.host + ":" + std::to_string(opts_.port));
  // httplib listened with a backlog of 5: a burst of connections then waits for SYN retries
  // (seconds) or is reset. Listening again on a listening socket only changes the backlog.
  if (svr_sock_ != INVALID_SOCKET) ::listen(svr_sock_, opts_.listen_backlog);
  return OkStatus();
}

void HttpServer::stop_accepting() {
  // NOTE: httplib's stop() would also end every streamed response at its next chunk (its write
  // loop stops when the server socket is gone); shutting the listening socket ends only the
  // accept loop (accept fails), and listen_after_bind then waits for the connections.
  if (stopping_.exchange(true)) return;
  if (svr_sock_ != INVALID_SOCKET) ::shutdown(svr_sock_, SHUT_RDWR);
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  if (t_reject) {
    refuse(sock, opts_.max_connections);
    return false;
  }
  Connection c;
  c.fd = sock;
  t_connection = &c;
  t_options = &opts_;
  ConnectionStream strm(c, stopping_);
  // httplib's keep-alive loop, with our stream: the first request is due within the header
  // timeout; a next one may take keep_alive_timeout_s to start and then has the header timeout.
  bool ok = false;
  c.deadline = Clock::now() + seconds(opts_.header_timeout_s);
  for (int served = 0; served < kMaxRequestsPerConnection && !stopping_; ++served) {
    if (served > 0) {
      c.phase = Phase::kAwaitingRequest;
      c.deadline = Clock::now() + seconds(opts_.keep_alive_timeout_s);
      if (!strm.next_request()) break;
      c.deadline = Clock::now() + seconds(opts_.header_timeout_s);
    }
    bool connection_closed = false;
    ok = process_request(strm, /*close_connection=*/served + 1 == kMaxRequestsPerConnection, connection_closed, nullptr);
    if (!ok || connection_closed || c.close_after_response) break;
  }
  t_connection = nullptr;
  t_options = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Per-connection helpers for handlers

void set_connection_phase(Phase phase) {
  Connection* c = t_connection;
  if (!c || !t_options) return;
  c->phase = phase;
  if (phase == Phase::kReadingBody) c->deadline = Clock::now() + seconds(t_options->body_timeout_s);
  // kAwaitingRequest (the response is written): the keep-alive loop sets the next deadline.
}

void close_after_response() {
  if (t_connection) t_connection->close_after_response = true;
}

bool client_gone() {
  Connection* c = t_connection;
  if (!c || c->fd < 0) return false;
  pollfd p{c->fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR)) return true;
  char byte;
  const bool read_side_closed = (p.revents & POLLRDHUP) || recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  if (!read_side_closed) return false;  // unread data: a pipelined next request
  if (c->probed) return false;
  c->probed = true;
  static const char kProbe[] = "HTTP/1.1 100 Continue\r\n\r\n";
  return ::send(c->fd, kProbe, sizeof kProbe - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
}

}  // namespace tessera::server

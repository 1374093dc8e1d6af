#include "server/http.h"

#include <httplib.h>

#include <string>

namespace tessera::server {

Result<std::unique_ptr<httplib::Server>> bind_http(const ServeOptions& opts, int* port) {
  auto svr = std::make_unique<httplib::Server>();
  const int threads = opts.http_threads > 0 ? opts.http_threads : opts.max_in_flight + 8;
  svr->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  *port = opts.port == 0 ? svr->bind_to_any_port(opts.host) : (svr->bind_to_port(opts.host, opts.port) ? opts.port : -1);
  if (*port < 0) return Unavailable("cannot listen on " + opts.host + ":" + std::to_string(opts.port));
  return svr;
}

}  // namespace tessera::server

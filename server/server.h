// tessera_server: an OpenAI-compatible HTTP server over one model, with continuous batching
// through an EngineThread. `tessera serve` (examples/cli/serve.cpp) starts a Server, loads the
// model and builds the engine while /health answers 503, then hands them to it.
#pragma once
#include <memory>

#include "core/sched/engine_thread.h"
#include "core/status.h"
#include "models/model.h"
#include "server/options.h"
#include "server/signals.h"

namespace tessera::server {

struct ServerContext;
class HttpServer;

class Server {
 public:
  // |signals| must have been created before any thread started, and outlive the Server.
  Server(const ServeOptions& opts, SignalWatcher& signals);
  // Stops answering if wait() was not reached.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds opts.host:opts.port and answers on threads of its own: until set_ready(), /health
  // and every other route answer 503 (a load balancer's readiness probe keeps traffic away).
  // Prints "serve: loading; http://HOST:PORT" on stderr. A port in use is Unavailable.
  Status start();
  // Serves |model| through |engine| from now on (their KV cache: |kv_blocks| blocks of
  // |block_size| tokens) and prints "listening on HOST:PORT" on stdout (scripts wait for that
  // line). Both must outlive wait().
  void set_ready(Model& model, EngineThread& engine, int32_t kv_blocks, int32_t block_size);
  // Whether SIGTERM/SIGINT arrived (during loading: the caller need not finish it).
  bool stopping() const;
  // Until SIGTERM/SIGINT: then it stops accepting, finishes the requests in flight within the
  // grace period and returns once every connection ended. An error when the HTTP server
  // stopped by itself.
  Status wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::server

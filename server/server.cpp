#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "server/context.h"
#include "server/http.h"
#include "server/routes.h"

namespace tessera::server {

namespace {

// After SIGTERM: waits up to the grace period for the requests in flight, then cancels the rest
// (their streams end with finish_reason "abort" and [DONE]). Ends early when |stop| is set.
class GraceTimer {
 public:
  void start(ServerContext& ctx) {
    thread_ = std::thread([this, &ctx] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(ctx.opts.shutdown_grace_s);
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_ && ctx.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
        cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (stop_ || ctx.in_flight.load() == 0) return;
      std::vector<RequestId> left;
      {
        std::lock_guard<std::mutex> ctx_lock(ctx.mu);
        left.assign(ctx.running.begin(), ctx.running.end());
      }
      std::fprintf(stderr, "serve: grace period over: cancelling %zu request(s)\n", left.size());
      ctx.aborting = true;
      for (RequestId id : left) ctx.engine.cancel(id);
    });
  }
  ~GraceTimer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

Status serve(Model& model, EngineThread& engine, const ServeOptions& opts, SignalWatcher& signals) {
  ServerContext ctx{model, engine, opts};
  ctx.max_model_len = opts.kv_tokens > 0 ? std::min(model.context_length(), opts.kv_tokens) : model.context_length();
  ctx.created_base = int64_t(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  HttpServer svr(opts);
  int port = -1;
  TS_RETURN_IF_ERROR(svr.bind(&port));
  register_routes(svr, ctx);
  GraceTimer grace;
  signals.start([&](int sig, int count) {
    if (count > 1) {  // the second signal: the user does not want to wait
      std::fprintf(stderr, "serve: signal %d again: exiting now\n", sig);
      std::_Exit(128 + sig);
    }
    std::fprintf(stderr, "serve: signal %d: no new requests; finishing those in flight (up to %g s), then exiting\n", sig,
                 opts.shutdown_grace_s);
    ctx.shutting_down = true;
    svr.stop_accepting();
    grace.start(ctx);
  });
  std::fprintf(stderr, "serve: %s (max_model_len %d) on http://%s:%d\n", opts.model_name.c_str(), ctx.max_model_len,
               opts.host.c_str(), port);
  std::printf("listening on %s:%d\n", opts.host.c_str(), port);  // scripts wait for this line
  std::fflush(stdout);
  const bool clean = svr.listen_after_bind() || ctx.shutting_down;
  signals.stop();
  if (!clean) return Unavailable("the HTTP server stopped unexpectedly");
  return OkStatus();
}

}  // namespace tessera::server

#include "server/server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "server/context.h"
#include "server/http.h"
#include "server/routes.h"

namespace tessera::server {

namespace {

// After SIGTERM: waits up to the grace period for the requests in flight, then cancels the rest
// (their streams end with finish_reason "abort" and [DONE]), then calls |done| (which stops
// accepting). Ends early when |stop| is set.
class GraceTimer {
 public:
  void start(ServerContext& ctx, std::function<void()> done) {
    thread_ = std::thread([this, &ctx, done = std::move(done)] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(ctx.opts.shutdown_grace_s);
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_ && ctx.in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline)
        cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (stop_) return;
      if (ctx.in_flight.load() == 0) return done();
      std::vector<RequestId> left;
      {
        std::lock_guard<std::mutex> ctx_lock(ctx.mu);
        left.assign(ctx.running.begin(), ctx.running.end());
      }
      std::fprintf(stderr, "serve: grace period over: cancelling %zu request(s)\n", left.size());
      ctx.aborting = true;
      for (RequestId id : left) ctx.engine->cancel(id);
      done();
    });
  }
  // Ends the timer (it cancels nothing more). Idempotent.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  ~GraceTimer() { stop(); }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

struct Server::Impl {
  Impl(const ServeOptions& opts, SignalWatcher& signals) : ctx{nullptr, nullptr, opts}, svr(opts), signals(signals) {}
  ServerContext ctx;
  HttpServer svr;
  SignalWatcher& signals;
  GraceTimer grace;
  int port = -1;
  std::thread listener;
  std::atomic<bool> listen_ok{false};
  bool waited = false;
};

Server::Server(const ServeOptions& opts, SignalWatcher& signals) : impl_(std::make_unique<Impl>(opts, signals)) {}

Server::~Server() {
  if (impl_->listener.joinable()) {  // wait() was not reached (a failed load): stop at once
    impl_->ctx.shutting_down = true;
    impl_->svr.stop_accepting();
    impl_->listener.join();
  }
  impl_->signals.stop();
}

Status Server::start() {
  Impl& m = *impl_;
  m.ctx.created_base = int64_t(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  TS_RETURN_IF_ERROR(m.svr.bind(&m.port));
  register_routes(m.svr, m.ctx);
  m.signals.start([&m](int sig, int count) {
    if (count > 1 || !m.ctx.ready.load()) {  // the second signal, or nothing loaded to finish
      std::fprintf(stderr, "serve: signal %d%s: exiting now\n", sig, count > 1 ? " again" : " while loading");
      std::_Exit(128 + sig);
    }
    std::fprintf(stderr, "serve: signal %d: no new requests; finishing those in flight (up to %g s), then exiting\n", sig,
                 m.ctx.opts.shutdown_grace_s);
    // Until the drain ends, new connections are still answered: /health and new requests get 503,
    // so a router or readiness probe moves traffic away before the port closes.
    m.ctx.shutting_down = true;
    m.grace.start(m.ctx, [&m] { m.svr.stop_accepting(); });
  });
  m.listener = std::thread([&m] { m.listen_ok = m.svr.listen_after_bind(); });
  std::fprintf(stderr, "serve: loading; http://%s:%d answers 503 until ready\n", m.ctx.opts.host.c_str(), m.port);
  return OkStatus();
}

void Server::set_ready(Model& model, EngineThread& engine, int32_t kv_blocks, int32_t block_size) {
  Impl& m = *impl_;
  m.ctx.model = &model;
  m.ctx.engine = &engine;
  m.ctx.kv_blocks = kv_blocks;
  m.ctx.kv_block_size = block_size;
  const int32_t kv_tokens = kv_blocks * block_size;
  m.ctx.max_model_len = kv_tokens > 0 ? std::min(model.context_length(), kv_tokens) : model.context_length();
  // Indexing the vocabulary for grammars takes tens of ms: once, before the first request.
  const auto t0 = std::chrono::steady_clock::now();
  auto grammars = GrammarCompiler::create(grammar_vocab(model.tokenizer(), model.vocab_size()));
  if (grammars.ok()) {
    m.ctx.grammars = std::move(grammars).value();
    std::fprintf(stderr, "serve: structured output: vocabulary indexed for grammars in %.0f ms\n",
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  else if (grammars.status().code() == StatusCode::kUnavailable) m.ctx.grammar_why = grammars.status().message();
  else m.ctx.grammar_why = "structured output is unavailable: " + grammars.status().message();
  auto pieces = std::make_shared<std::vector<std::string>>(size_t(model.vocab_size()));
  for (int32_t id = 0; id < std::min(model.vocab_size(), model.tokenizer().vocab_size()); ++id)
    (*pieces)[size_t(id)] = model.tokenizer().token_to_piece(id);
  m.ctx.token_pieces = std::move(pieces);
  {
    std::lock_guard<std::mutex> lock(m.ctx.lora_mu);
    for (size_t i = 0; i < model.loras().size(); ++i) {
      const LoraAdapter& a = model.loras()[i];
      if (a.id != 0) m.ctx.loras.push_back({a.name, a.path, int32_t(i), a.rank, a.alpha});
    }
  }
  m.ctx.ready = true;  // after the fields above: handlers read them once they see it
  std::fprintf(stderr, "serve: %s (max_model_len %d) on http://%s:%d\n", m.ctx.opts.model_name.c_str(), m.ctx.max_model_len,
               m.ctx.opts.host.c_str(), m.port);
  std::printf("listening on %s:%d\n", m.ctx.opts.host.c_str(), m.port);  // scripts wait for this line
  std::fflush(stdout);
}

bool Server::stopping() const { return impl_->ctx.shutting_down.load(); }

Status Server::wait() {
  Impl& m = *impl_;
  if (m.listener.joinable()) m.listener.join();
  m.signals.stop();
  m.grace.stop();  // before the caller takes the engine down
  if (!m.listen_ok.load() && !m.ctx.shutting_down.load()) return Unavailable("the HTTP server stopped unexpectedly");
  return OkStatus();
}

}  // namespace tessera::server

// The OpenAI-compatible HTTP layer of `tessera serve`: request parsing and validation into
// GenerationRequests, response and SSE formatting, and the route handlers. A thin layer over
// EngineThread: handlers run on httplib's worker threads, token callbacks on the engine thread
// (they only format and queue text, never block on the network).
#pragma once
#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "core/sched/engine_thread.h"
#include "models/model.h"

namespace httplib { class Server; }

namespace tessera::cli {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model_name;        // the id in /v1/models (default: the file's stem)
  int max_in_flight = 64;        // requests admitted at once; more are answered 429
  std::string step_log;          // CSV trace of every engine step ("" none)
  int http_threads = 0;          // 0: max_in_flight + 8
};

// Shared by every handler.
struct ServerContext {
  Model& model;
  EngineThread& engine;
  ServeOptions opts;
  std::atomic<int> in_flight{0};
  std::atomic<bool> shutting_down{false};
  std::atomic<int64_t> created_base{0};

  // Completed-request metrics (Prometheus summaries as sum + count).
  std::mutex mu;
  std::map<std::string, int64_t> finished;  // by finish reason
  std::map<int, int64_t> http_errors;       // by status code
  double ttft_sum_s = 0, tpot_sum_s = 0, e2e_sum_s = 0;
  int64_t ttft_count = 0, tpot_count = 0, e2e_count = 0;
  int64_t cached_prompt_tokens = 0;
};

// Installs /health, /metrics, /v1/models, /v1/completions and /v1/chat/completions.
void register_routes(httplib::Server& svr, ServerContext& ctx);

}  // namespace tessera::cli

// State shared by every handler of one server: the model, the engine thread, the options, the
// admission count and the completed-request metrics. Handlers run on httplib's worker threads.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "core/sched/engine_thread.h"
#include "models/model.h"
#include "server/options.h"

namespace tessera::server {

struct ServerContext {
  Model& model;
  EngineThread& engine;
  ServeOptions opts;
  int32_t max_model_len = 0;  // the longest sequence a request may reach: min(model context, KV capacity)
  std::atomic<int> in_flight{0};
  std::atomic<bool> shutting_down{false};  // SIGTERM: new requests get 503
  std::atomic<bool> aborting{false};       // the grace period is over: requests left are cancelled
  std::atomic<int64_t> created_base{0};

  // Completed-request metrics (Prometheus summaries as sum + count).
  std::mutex mu;
  std::map<std::string, int64_t> finished;  // by finish reason
  std::map<int, int64_t> http_errors;       // by status code
  double ttft_sum_s = 0, tpot_sum_s = 0, e2e_sum_s = 0;
  int64_t ttft_count = 0, tpot_count = 0, e2e_count = 0;
  int64_t cached_prompt_tokens = 0;
  std::set<RequestId> running;  // submitted and not finished (for the abort at the end of the grace)
};

}  // namespace tessera::server

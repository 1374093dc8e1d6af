// State shared by every handler of one server: the model, the engine thread, the options, the
// admission count and the completed-request metrics. Handlers run on httplib's worker threads.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/sched/engine_thread.h"
#include "grammar/compiler.h"
#include "models/model.h"
#include "server/options.h"

namespace tessera::server {

// A Prometheus histogram: fixed upper bounds, per-bucket counts (made cumulative when written).
struct Histogram {
  std::vector<double> bounds;   // ascending upper bounds; +Inf is implied
  std::vector<int64_t> counts;  // [bounds.size() + 1]: the last is the +Inf bucket
  double sum = 0;
  int64_t count = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

// The largest |scale| a request or POST /lora-adapters may give an adapter (llama.cpp takes any
// float; a bound keeps a typo from turning the logits into infinities).
inline constexpr double kMaxLoraScale = 100.0;

// A LoRA adapter the server serves (docs/lora.md): what request parsing and the listings read, so
// handler threads never touch the Model's own list (the engine thread changes it on a run-time
// load or unload).
struct ServedLora {
  std::string name, path;
  int32_t slot = -1;  // Model::add_lora's; llama.cpp's "lora" id
  int rank = 0;
  double alpha = 0.0;
};

struct ServerContext {
  // Null until the model is loaded; |ready| is set after them (handlers check it first).
  Model* model = nullptr;
  EngineThread* engine = nullptr;
  ServeOptions opts;
  // Structured output for the model's vocabulary; null (and grammar_why says why) when this
  // build has no XGrammar or the vocabulary could not be indexed.
  std::unique_ptr<GrammarCompiler> grammars;
  std::string grammar_why;
  // Every token's text (the reasoning gate follows the thinking phase through it).
  std::shared_ptr<const std::vector<std::string>> token_pieces;
  int32_t max_model_len = 0;  // the longest sequence a request may reach: min(model context, KV capacity)
  int32_t kv_blocks = 0, kv_block_size = 0;
  std::atomic<bool> ready{false};          // loaded: until then every route answers 503
  std::atomic<int> in_flight{0};
  std::atomic<bool> shutting_down{false};  // SIGTERM: new requests get 503
  std::atomic<bool> aborting{false};       // the grace period is over: requests left are cancelled
  std::atomic<int64_t> created_base{0};

  // Completed-request metrics.
  std::mutex mu;
  std::map<std::string, int64_t> finished;  // by finish reason
  std::map<int, int64_t> http_errors;       // by status code
  double ttft_sum_s = 0, tpot_sum_s = 0, e2e_sum_s = 0;
  int64_t ttft_count = 0, tpot_count = 0, e2e_count = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t prompt_tokens = 0;  // of finished requests (each request once, whatever its n)
  // vLLM's buckets (vllm/v1/metrics/loggers.py), so dashboards built for it read these as is.
  Histogram ttft_hist{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                       40.0, 80.0, 160.0, 640.0, 2560.0}};
  Histogram itl_hist{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                      80.0}};
  Histogram e2e_hist{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                      960.0, 1920.0, 7680.0}};
  std::set<RequestId> running;  // submitted and not finished (for the abort at the end of the grace)

  // LoRA adapters served, by slot order; guarded by lora_mu (handlers read, load/unload write).
  mutable std::mutex lora_mu;
  std::vector<ServedLora> loras;
  // The adapter slot a request that names none runs under (-1: the base model), as llama.cpp's
  // global scales set it (POST /lora-adapters); guarded by lora_mu.
  int32_t default_lora = -1;
  float default_lora_scale = 1.0f;  // its scale (a multiple of the one it was loaded with)
  std::vector<ServedLora> lora_snapshot() const {
    std::lock_guard<std::mutex> lock(lora_mu);
    return loras;
  }
};

}  // namespace tessera::server

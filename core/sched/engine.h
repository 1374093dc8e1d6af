// Engine: owns the step loop over one model on one device: scheduler, KV cache, sampling,
// stop conditions, callbacks and per-request metrics. Single-threaded: call submit/step/cancel
// from one thread (a background-thread mode with a thread-safe queue sits on top of it).
#pragma once
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/sched/sampler.h"
#include "core/sched/scheduler.h"
#include "core/sched/step_plan.h"

namespace tessera {

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct RequestMetrics {
  double ttft_ms = 0;   // submit -> first token
  double e2e_ms = 0;    // submit -> finish
  double tpot_ms = 0;   // mean time per output token after the first
  double max_itl_ms = 0;  // worst inter-token latency
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  int32_t preemptions = 0;
};

struct TokenEvent {
  RequestId id;
  int32_t token;           // -1 on a finish event without a token
  std::string text;        // the text this token completes (UTF-8 safe; stop strings removed)
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
  FinishReason finish = FinishReason::kNone;  // set on the last event of a request
  std::string error;       // when finish == kError
  const RequestMetrics* metrics = nullptr;    // on the last event
};
// Runs on the engine thread; must not block.
using TokenCallback = std::function<void(const TokenEvent&)>;

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int32_t max_tokens = 256;
  bool ignore_eos = false;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  int priority = 0;
  TokenCallback on_token;
};

// The tokenizer functions the engine needs, kept abstract (core never includes models/).
struct TextCodec {
  std::function<std::string(int32_t)> piece;    // raw bytes of one token
  std::function<bool(int32_t)> is_eog;          // end of generation (EOS, EOT, <|im_end|>)
};

struct EngineConfig {
  SchedulerConfig scheduler;
};

class Engine {
 public:
  Engine(ModelRunner& model, KvCache& kv, TextCodec codec, EngineConfig cfg = {});
  ~Engine();

  // Validates (empty prompt, prompt longer than the context or than the whole KV pool, bad
  // sampling settings) and queues the request.
  Result<RequestId> submit(GenerationRequest req);
  // Runs one scheduler step (a batch of decodes and prefill chunks). OK with nothing to do.
  Status step();
  // Steps until every request has finished.
  Status run_until_idle();
  // Finishes |id| with FinishReason::kCancelled and frees its blocks (no-op if unknown).
  void cancel(RequestId id);
  bool idle() const { return scheduler_.idle(); }

  const Scheduler& scheduler() const { return scheduler_; }
  const KvCache& kv() const { return kv_; }

 private:
  struct Active;
  void emit_token(Active& a, Sequence& s, const SampleResult& r);
  void finish(Active& a, FinishReason reason, const std::string& error = {});
  bool check_stop(Active& a, std::string* text);

  ModelRunner& model_;
  KvCache& kv_;
  TextCodec codec_;
  EngineConfig cfg_;
  Scheduler scheduler_;
  std::map<RequestId, std::unique_ptr<Active>> active_;
  RequestId next_id_ = 1;
  uint64_t arrivals_ = 0;
  StepPlan plan_;
  std::vector<float> logits_;
};

}  // namespace tessera

// Engine: owns the step loop over one model on one device: scheduler, KV cache, sampling,
// stop conditions, callbacks and per-request metrics. Single-threaded: call submit/step/cancel
// from one thread; EngineThread (core/sched/engine_thread.h) runs it on a background thread
// behind a thread-safe queue. validate() and reserve_id() are the exceptions: they are safe from
// any thread.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/sched/grammar.h"
#include "core/sched/proposer.h"
#include "core/sched/sampler.h"
#include "core/sched/scheduler.h"
#include "core/sched/spec_cost_gate.h"
#include "core/sched/step_plan.h"

namespace tessera {

// kGrammarDeadEnd: the request's grammar allowed no next token (its text so far is kept).
enum class FinishReason { kNone, kStop, kLength, kCancelled, kError, kGrammarDeadEnd };
// "stop", "length", "cancelled", "error", "grammar_dead_end"
const char* finish_reason_name(FinishReason r);

struct RequestMetrics {
  double ttft_ms = 0;   // submit -> first token
  double e2e_ms = 0;    // submit -> finish
  double tpot_ms = 0;   // mean time per output token after the first
  double max_itl_ms = 0;  // worst inter-token latency
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens taken from the prefix cache (not computed)
  int32_t generated_tokens = 0;
  int32_t preemptions = 0;
};

struct TokenEvent {
  RequestId id;
  int index = 0;           // which of the request's n choices
  int32_t token;           // -1 on a finish event without a token
  std::string text;        // the text this token completes (UTF-8 safe; stop strings removed)
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
  FinishReason finish = FinishReason::kNone;  // set on the last event of a request
  std::string error;       // when finish == kError
  std::vector<float> embedding;  // embedding requests: the pooled vector, on the finish event
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
  int n = 1;  // parallel samples: the choices fork after the prompt and share its KV blocks
  // Prefill only: the prompt runs whole in one step (no chunking, no prefix cache, since pooling
  // and bidirectional attention need every token computed together), nothing is sampled, and
  // the request finishes in that step with TokenEvent::embedding, its KV blocks freed at once.
  // Needs ModelRunner::embedding_dim() > 0 and a prompt within max_batch_tokens.
  bool embed = false;
  // Structured output: every sampled token must be allowed by this grammar (its state before the
  // first token; each choice works on its own fork). Its vocab_size() must be the model's.
  std::shared_ptr<const Grammar> grammar;
  // Speculative decoding: draft tokens per step for this request. -1: the engine's default
  // (EngineConfig::spec.k, 0 when the engine has no proposer); 0: off; > 0: at most this many.
  int32_t spec_k = -1;
  // LoRA (docs/lora.md): the adapter slot this request runs under (Model::add_lora), -1 for the
  // base model, or kDefaultLora for the model's default (ModelRunner::default_lora). The engine
  // keys the prefix cache and KV events with the adapter (ModelRunner::lora(slot).id).
  static constexpr int32_t kDefaultLora = -2;
  int32_t lora = kDefaultLora;
  // The adapter's scale for this request (llama.cpp's per-request "scale"; finite): a multiple of
  // the scale it was loaded with. 0 runs the base model. Ignored without an adapter.
  float lora_scale = 1.0f;
  TokenCallback on_token;
};

// The grammar masks' host time (one mask per token sampled under a grammar).
struct GrammarStats {
  int64_t masks = 0;
  int64_t dead_ends = 0;       // requests finished with FinishReason::kGrammarDeadEnd
  double mask_ms_sum = 0;
  double mask_ms_max = 0;
  double mask_ms_p50 = 0;      // from a 10 us histogram up to 20 ms (beyond: counted as 20 ms)
  double mask_ms_p99 = 0;
};

// Engine-wide counters and gauges (a snapshot): the scheduler's and the KV manager's own stats,
// the KV occupancy, and the engine's counters.
struct EngineStats {
  SchedulerStats sched;  // steps, preemptions, admitted and cached prompt tokens, step cost policy
  KvManagerStats kv;     // prefix lookups and hits, copy-on-write, swaps
  KvUsage kv_usage;      // the full-attention layers' pool
  // Hybrid memory: the sliding-window layers' pool (blocks_total 0: none), and the bytes of K/V
  // that sequences hold in each kind of layer (blocks in use x layers x a layer's block bytes).
  KvUsage window_kv_usage;
  int64_t kv_bytes_full = 0;
  int64_t kv_bytes_window = 0;
  int32_t kv_window = 0;  // keys a window layer's query sees (0: no window group)
  // Recurrent layers (has_state): their state pool's and manager's counters, and the bytes of
  // state that running sequences hold (live slots x one slot of every recurrent layer).
  bool has_state = false;
  StateManagerStats state;
  int64_t state_bytes = 0;
  // The most blocks sequences held at once in each pool (after a step's allocation).
  int32_t kv_blocks_peak = 0;
  int32_t kv_window_blocks_peak = 0;
  // The blocks held during the latest step that ran (the end of a generation: its last decode).
  int32_t kv_blocks_last_step = 0;
  int32_t kv_window_blocks_last_step = 0;
  ExecutorStats exec;    // the model's executor: executables built (recorded) and reused
  GrammarStats grammar;  // structured output: mask time per token
  SpecStats spec;        // speculative decoding
  int64_t generated_tokens = 0;
  int64_t requests_finished = 0;  // choices finished (each of a request's n counts)
  int32_t running = 0;            // sequences holding blocks
  int32_t waiting = 0;            // sequences queued for admission
  // Of those, the sequences under each LoRA adapter slot [ModelRunner::n_loras()].
  std::vector<int32_t> lora_running, lora_waiting;
  // Cached over admitted prompt tokens (admissions include re-admissions after preemption).
  double prefix_hit_rate() const {
    return sched.admitted_tokens ? double(sched.cached_tokens) / double(sched.admitted_tokens) : 0.0;
  }
};

// The tokenizer functions the engine needs, kept abstract (core never includes models/).
struct TextCodec {
  std::function<std::string(int32_t)> piece;    // raw bytes of one token
  std::function<bool(int32_t)> is_eog;          // end of generation (EOS, EOT, <|im_end|>)
};

// One engine step, for a trace of the step cost policy (EngineConfig::on_step).
struct StepRecord {
  int64_t step = 0;
  int32_t seqs = 0;
  int32_t tokens = 0;
  int32_t prefill_tokens = 0;
  double limit_ms = 0;      // the cost limit of its prefill chunks (0: none)
  double predicted_ms = 0;  // before it ran
  double measured_ms = 0;    // what the fit saw (wall, or CPU time per thread: cost_cpu_threads)
  double wall_ms = 0;
  StepCostCoefficients cost;  // the fit after it
};

struct EngineConfig {
  SchedulerConfig scheduler;
  SpecConfig spec;
  // Called on the engine thread after every step that computed something; must not block.
  std::function<void(const StepRecord&)> on_step;
  // > 0: the step cost model is fitted to this process's CPU time per step divided by this many
  // threads (the CPU device's pool) instead of wall time. On a machine shared with other work
  // the wall time of identical steps varies several-fold with their load, which the fit would
  // otherwise chase; the policy's limit is a ratio of predictions, so the unit does not matter.
  // Only for devices that compute on this process's threads (a GPU's wait may not burn CPU).
  int cost_cpu_threads = 0;
  // (tests) When set, the step cost model is fitted to this function of the step just run
  // instead of a clock, so a test of cost-driven scheduling does not depend on the machine's load.
  std::function<double(const StepPlan&)> step_ms_for_test;
  // (tests) When set, the speculative cost gate takes a proposer call over |n| sequences to cost
  // this many milliseconds instead of timing it.
  std::function<double(size_t n)> propose_ms_for_test;
};

class Engine {
 public:
  Engine(ModelRunner& model, KvCache& kv, TextCodec codec, EngineConfig cfg = {});
  ~Engine();

  // Validates (empty prompt, prompt longer than the context or than the whole KV pool, bad
  // sampling settings) and queues the request.
  Result<RequestId> submit(GenerationRequest req);
  // The checks of submit. Thread-safe: reads only the model's and cache's fixed configuration.
  Status validate(const GenerationRequest& req) const;
  // A fresh request id for submit_as. Thread-safe.
  RequestId reserve_id() { return next_id_.fetch_add(1); }
  // submit under an id from reserve_id.
  Status submit_as(RequestId id, GenerationRequest req);
  // Runs one scheduler step (a batch of decodes and prefill chunks). OK with nothing to do.
  Status step();
  // Steps until every request has finished.
  Status run_until_idle();
  // Finishes every choice of |id| with FinishReason::kCancelled and frees their blocks (no-op if
  // unknown).
  void cancel(RequestId id);
  void cancel_all();
  bool idle() const { return scheduler_.idle(); }
  EngineStats stats() const;

  const Scheduler& scheduler() const { return scheduler_; }
  const KvCache& kv() const { return kv_; }

 private:
  struct Active;
  Status validate_embed(const GenerationRequest& req) const;
  bool emit_token(Active& a, Sequence& s, const SampleResult& r);
  void propose_drafts();
  void prune_to_grammar(std::vector<DraftRequest>& batch);
  void verify_and_emit(RequestId seq_id, const float* logits, int32_t n_draft);
  void fork_choices(Active& parent, const float* logits);
  void sample_and_emit(RequestId seq_id, const float* logits);
  // The KV blocks in use after a step's allocation (and their peaks), for EngineStats.
  void record_kv_use();
  // A collected step's results: each sampling row's token (or a draft's verification), then each
  // pooled request's embedding, in plan order.
  void emit_step(const std::vector<ScheduledSeq>& scheduled, const std::vector<RequestId>& ids);
  // Fills the grammar mask of |seq_id|'s next token (Active::mask) unless it is filled already;
  // a no-op without a grammar. Called while the device runs the step that samples it.
  void prepare_mask(RequestId seq_id);
  void prepare_draft_masks(RequestId seq_id, int32_t n_draft);
  void observe_mask_ms(double ms);
  void finish(Active& a, FinishReason reason, const std::string& error = {}, std::vector<float> embedding = {});
  // The request's grammar allows no next token: it ends with FinishReason::kGrammarDeadEnd.
  void finish_dead_end(Active& a);
  bool check_stop(Active& a, std::string* text);

  ModelRunner& model_;
  KvCache& kv_;
  TextCodec codec_;
  EngineConfig cfg_;
  Scheduler scheduler_;
  std::map<RequestId, std::unique_ptr<Active>> active_;
  std::atomic<RequestId> next_id_{1};
  int64_t generated_tokens_ = 0;
  int64_t requests_finished_ = 0;
  int32_t kv_blocks_peak_ = 0, kv_window_blocks_peak_ = 0;  // EngineStats' peaks
  int32_t kv_blocks_last_ = 0, kv_window_blocks_last_ = 0;  // and the latest step's
  uint64_t arrivals_ = 0;
  StepPlan plan_;
  std::vector<float> logits_;
  Status swap_status_;  // reserving the swap space
  GrammarStats grammar_stats_;
  std::vector<int64_t> mask_hist_;  // mask time in 10 us buckets, [2000]
  SpecStats spec_;
  SpecCostGate spec_gate_;  // whether drafts pay, and how long they may be
};

}  // namespace tessera

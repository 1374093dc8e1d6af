// Scheduler: iteration-level (continuous) batching over the paged KV cache. Each step has a
// token budget; running decodes go first, then chunks of waiting prefills (chunked prefill).
// The Scheduler keeps the policy and consults two components: the KvManager
// (core/kv/kv_manager.h: block tables, prefix cache, copy-on-write, swap slots), which only says
// whether blocks could be had, and the StepCostPolicy (core/sched/step_cost_policy.h), which
// sizes prefill chunks beside running decodes. When blocks run out, the lowest-priority,
// latest-arrived running sequence is preempted: recompute (default: its blocks are freed and it
// re-prefills later) or swap (its computed blocks are copied to host slots, StepPlan::swap_out,
// and back into fresh blocks when it is readmitted, StepPlan::swap_in; with no host slot free it
// falls back to recompute). No request is dropped because of KV pressure alone. With prefix
// caching, a sequence entering the running set takes its leading full blocks from the cache when
// their content hash matches, and computes only the rest (at least its last token, so the step
// has logits for it). Forks share blocks; the first write into a shared partial block copies it
// (StepPlan::block_copies). A model with recurrent layers adds a StateManager
// (core/kv/state_manager.h): a sequence is admitted only with a free state slot, a prefix match
// is cut back to the longest prefix whose state is checkpointed, prefill chunks end at checkpoint
// boundaries, a rejected draft rolls the state back and recomputes the accepted tokens, forks copy
// the state (or the child waits and recomputes), and swap preemption swaps the state too.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/kv/hybrid_kv.h"
#include "core/kv/state_manager.h"
#include "core/sched/step_cost.h"
#include "core/sched/step_cost_policy.h"
#include "core/sched/step_plan.h"
#include "core/status.h"

namespace tessera {

using RequestId = int64_t;

struct Sequence {
  RequestId id = 0;
  int priority = 0;          // higher runs first and is preempted last
  uint64_t arrival = 0;      // submission order
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int32_t n_prompt = 0;
  int32_t n_computed = 0;    // leading tokens whose K/V are in the cache (blocks: KvManager)
  int32_t n_cached = 0;      // tokens taken from the prefix cache at the first admission
  bool admitted = false;     // has been admitted once (n_cached is final)
  int32_t n_preemptions = 0;
  bool finished = false;
  bool embed = false;        // prefill only, whole in one step, no prefix cache (GenerationRequest::embed)
  LoraRef lora;              // the adapter it runs under (GenerationRequest::lora, resolved)
  // Speculative decoding: tokens drafted for this step after the pending one (the engine sets
  // them before planning; the plan may shorten them), and the draft's probabilities
  // ([draft.size(), vocab], empty for a one-hot draft). Never part of |tokens|.
  std::vector<int32_t> draft;
  std::vector<float> draft_q;

  int32_t n_generated() const { return int32_t(tokens.size()) - n_prompt; }
  int32_t n_pending() const { return int32_t(tokens.size()) - n_computed; }
};

struct SchedulerConfig {
  int32_t max_batch_tokens = 512;  // token budget per step
  int32_t max_seqs = 64;           // sequences per step
  int32_t block_size = 16;
  bool prefix_caching = true;
  bool swap = false;          // preempt by swapping to host memory (else recompute)
  int32_t swap_blocks = 0;    // host slots for swapped blocks (KvCache::reserve_swap)
  // Recurrent layers: tokens between state checkpoints (StateManagerConfig::checkpoint_every);
  // prefill chunks end at each, and at the prompt's last block boundary.
  int32_t state_checkpoint_every = 512;
  // Recurrent layers: prefill steps and checkpoints fall on multiples of this many tokens (and of
  // the block size) where they can, so a prompt's state comes out bit-identical however it was
  // split (a prefix-cache hit, a chunked prefill, a preemption): the CPU's chunked delta rule
  // (backends/cpu/recurrent.cpp) works in 64-token chunks from each step's start. 1: no alignment.
  int32_t state_align = 64;
  // LoRA: distinct adapters the running sequences may use at once (the model's device slots,
  // ModelRunner::lora_device_slots; the engine sets it each step). A waiting sequence whose
  // adapter would exceed it stays waiting (never dropped) and the ones behind it may go first.
  // 0: no limit.
  int32_t max_loras = 0;
  // Step-cost policy (core/sched/step_cost_policy.h, StepCostPolicyConfig): while decodes run,
  // each step's prefill chunks are the largest whose predicted step time stays within itl_factor
  // x the predicted decode-only step (and within max_step_ms when > 0), at least
  // min_prefill_chunk tokens per step so the prefill always progresses; max_batch_tokens stays
  // the hard cap. With no decode running, or more sequences waiting on prefill than decoding,
  // prefill fills the budget (max_step_ms still holds). itl_factor 0 turns the
  // policy off: chunks then fill the budget (plans independent of timing).
  double itl_factor = 4.0;  // 4 keeps a long prompt's TTFT near a fixed 512-token budget's (docs/serving.md)
  double max_step_ms = 0.0;
  int32_t min_prefill_chunk = 4;
  StepCostCoefficients cost_prior;  // the engine fills it from ModelRunner::cost_prior
  double cost_forgetting = 0.98;
  int32_t cost_probe_every = 16;  // StepCostPolicyConfig::probe_every
};

// One scheduled sequence of a step: its rows in the plan and whether it samples a token.
struct ScheduledSeq {
  Sequence* seq;
  int32_t n_new;       // tokens computed this step
  bool samples;        // the step completes its pending tokens: sample the next one
  bool pools = false;  // an embedding request computed whole this step: pool it (StepPlan::pool_seqs)
  int32_t n_draft = 0; // of n_new, draft tokens after the pending one (each has a logits row)
};

struct SchedulerStats {
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t admitted_tokens = 0;  // tokens of sequences at admission (prompt, or more after preemption)
  int64_t cached_tokens = 0;    // of which came from the prefix cache
  StepCostStats step;           // the step cost policy: the latest step and the fitted model
};

class Scheduler {
 public:
  // |pool| must outlive the scheduler, whose KvManager is its only user. |window_pool| and
  // |window| > 0: the KV cache's sliding-window layers have a pool of their own (HybridKv).
  // |states| (nullable): the recurrent layers' state pool, which the scheduler's StateManager uses.
  Scheduler(const SchedulerConfig& cfg, BlockPool& pool, BlockPool* window_pool = nullptr, int32_t window = 0,
            RecurrentStatePool* states = nullptr);

  // Takes ownership; the sequence waits until planned.
  void add(std::unique_ptr<Sequence> seq);
  // Plans one step into |plan|; returns the scheduled sequences (empty when idle).
  std::vector<ScheduledSeq> plan(StepPlan* plan);
  // After the step ran: marks the computed tokens (of a speculating sequence, only its pending
  // token: accept_draft adds the accepted draft tokens).
  void commit(const std::vector<ScheduledSeq>& scheduled);
  // Running sequences with exactly one pending token (decodes): the ones that may speculate.
  std::vector<Sequence*> decoding();
  // After verification: |n_accepted| draft tokens of |id|, now appended to its tokens, are
  // computed; the KV slots of the rejected ones are dropped (KvManager::truncate) and its draft
  // is cleared. No-op for an unknown id (it finished while emitting).
  void accept_draft(RequestId id, int32_t n_accepted);
  // The planned step took |ms| (the engine times it): fits the step cost model.
  void observe(double ms);
  // The sequences preempted since the last call (each once per preemption); clears the list. The
  // engine tells its proposer, whose per-sequence state (a draft model's KV) goes with them.
  std::vector<RequestId> take_preempted() { return std::exchange(preempted_, {}); }
  // Frees the blocks of a finished or cancelled sequence and forgets it.
  void finish(RequestId id);
  Sequence* find(RequestId id);
  // Adds |child| as a fork of running sequence |parent|: it shares all of the parent's blocks
  // (retained) and its computed state. Returns false when |parent| is not running.
  bool fork(RequestId parent, std::unique_ptr<Sequence> child);

  bool idle() const { return running_.empty() && waiting_.empty(); }
  // The sequence to give up on when a step could schedule nothing although work is left: the
  // running one that cannot grow (it is alone and the pool is exhausted), else the head of the
  // queue. 0 when idle.
  RequestId blocked() const;
  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  // Sequences per LoRA adapter slot [0, n_slots) that run (hold blocks) and that wait.
  void count_loras(int32_t n_slots, std::vector<int32_t>* running, std::vector<int32_t>* waiting) const;
  void set_max_loras(int32_t n) { cfg_.max_loras = n; }
  SchedulerStats stats() const;
  const KvManager& kv() const { return kv_.full(); }
  // The sliding-window layers' bookkeeping, or nullptr when the cache has no window group.
  const KvManager* window_kv() const { return kv_.window(); }
  // The recurrent state bookkeeping, or nullptr when the model has no recurrent layers.
  const StateManager* states() const { return states_ ? &*states_ : nullptr; }
  const StepCostPolicy& cost_policy() const { return cost_; }
  const BlockPool& pool() const { return kv_.full().pool(); }

 private:
  void schedule_running(std::vector<ScheduledSeq>* out, int32_t* budget);
  void admit_waiting(std::vector<ScheduledSeq>* out, int32_t* budget);
  // The distinct adapters (slot, scale) of the running sequences, when max_loras limits them.
  std::vector<LoraRef> running_loras() const;
  // Whether |s|'s adapter is in |in_use| or a device slot is left (then it joins |in_use|).
  bool lora_fits(const Sequence& s, std::vector<LoraRef>* in_use) const;
  StepShape decodes() const;
  int32_t chunk_size(const Sequence& s, int32_t budget);
  // |kv_match|: the KV cache's first, uncut match (the branch point for the recurrent state).
  int32_t match_prefix(Sequence& s, int32_t* kv_match = nullptr);
  void release(RequestId id);  // frees every kind of memory |id| holds
  void take(std::vector<ScheduledSeq>* out, int32_t* budget, Sequence& s, int32_t n, int32_t n_draft = 0);
  void trim_draft(Sequence& s, int32_t d);
  void preempt(Sequence& s);
  Sequence* pick_victim(const Sequence* keep);
  void fill(StepPlan* plan, const std::vector<ScheduledSeq>& scheduled) const;
  void end_step(const std::vector<ScheduledSeq>& scheduled);

  SchedulerConfig cfg_;
  HybridKv kv_;
  std::optional<StateManager> states_;
  StepCostPolicy cost_;
  std::deque<std::unique_ptr<Sequence>> waiting_;   // by (priority, arrival)
  std::vector<std::unique_ptr<Sequence>> running_;  // have blocks
  SchedulerStats stats_;                            // but step: cost_.stats()
  std::vector<RequestId> preempted_;                // since the last take_preempted
};

}  // namespace tessera

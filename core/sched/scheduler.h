// Scheduler: iteration-level (continuous) batching over the paged KV cache. Each step has a
// token budget; running decodes go first, then chunks of waiting prefills (chunked prefill).
// When blocks run out, the lowest-priority, latest-arrived running sequence is preempted:
// recompute (default: its blocks are freed and it re-prefills later) or swap (its computed
// blocks are copied to host slots, StepPlan::swap_out, and back into fresh blocks when it is
// readmitted, StepPlan::swap_in; with no host slot free it falls back to recompute). No request is dropped because of
// KV pressure alone. With prefix caching, a sequence entering the running set takes its leading
// full blocks from the cache when their content hash matches, and computes only the rest (at
// least its last token, so the step has logits for it). Forks share blocks; the first write into
// a shared partial block copies it (StepPlan::block_copies).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/sched/step_cost.h"
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
  int32_t n_computed = 0;    // leading tokens whose K/V are in the cache
  std::vector<BlockId> blocks;
  std::vector<BlockHash> block_hashes;  // hashes of the leading full blocks registered in the pool
  int32_t n_cached = 0;      // tokens taken from the prefix cache at the first admission
  bool admitted = false;     // has been admitted once (n_cached is final)
  int32_t n_preemptions = 0;
  bool finished = false;
  std::vector<int32_t> host_slots;  // swapped out: the host slots of its first blocks, in order

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
  // Step-cost policy (core/sched/step_cost.h): while decodes run, each step's prefill chunks are
  // the largest whose predicted step time stays within itl_factor x the predicted decode-only
  // step (and within max_step_ms when > 0), at least min_prefill_chunk tokens per step so the
  // prefill always progresses; max_batch_tokens stays the hard cap. With no decode running,
  // prefill fills the budget. itl_factor 0 turns the policy off: chunks then fill the budget
  // (plans independent of timing).
  double itl_factor = 4.0;  // 4 keeps a long prompt's TTFT near a fixed 512-token budget's (docs/serving.md)
  double max_step_ms = 0.0;
  int32_t min_prefill_chunk = 4;
  StepCostCoefficients cost_prior;  // the engine fills it from ModelRunner::cost_prior
  double cost_forgetting = 0.98;
  // While a prefill runs beside decodes, every Nth step leaves the prefill out (0: never): a
  // decode-only step whose time re-anchors the fit, which otherwise sees only look-alike
  // steps (the same decodes plus a chunk) and cannot tell the decodes' share from the chunk's.
  int32_t cost_probe_every = 16;
};

// One scheduled sequence of a step: its rows in the plan and whether it samples a token.
struct ScheduledSeq {
  Sequence* seq;
  int32_t n_new;       // tokens computed this step
  bool samples;        // the step completes its pending tokens: sample the next one
};

struct SchedulerStats {
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t admitted_tokens = 0;  // tokens of sequences at admission (prompt, or more after preemption)
  int64_t cached_tokens = 0;    // of which came from the prefix cache
  int64_t cow_copies = 0;       // shared partial blocks copied on write
  int64_t swap_outs = 0;        // preemptions that swapped (the rest recomputed)
  int64_t swap_ins = 0;
  int64_t blocks_swapped_out = 0;
  int64_t blocks_swapped_in = 0;
  // Step-cost policy: the latest step and the fitted coefficients.
  int64_t cost_limited_chunks = 0;  // prefill chunks the cost limit made smaller than the budget
  int32_t last_prefill_tokens = 0;  // prefill tokens in the latest step
  int32_t last_step_tokens = 0;
  double last_limit_ms = 0;         // its step-time limit (0: none, no decode was running)
  double last_predicted_ms = 0;     // its predicted time
  double last_step_ms = 0;          // its measured time (Scheduler::observe)
  StepCostCoefficients cost;        // fitted
};

// A snapshot of KV occupancy. Waste: allocated slots that hold no token (the partial last block
// of each sequence; shared blocks are counted once).
struct KvUsage {
  int32_t blocks_used = 0;      // blocks owned by some sequence
  int32_t blocks_cached = 0;    // free blocks that still hold reusable prefix content
  int64_t slots_allocated = 0;  // blocks_used * block_size
  int64_t slots_waste = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, BlockPool& pool);

  // Takes ownership; the sequence waits until planned.
  void add(std::unique_ptr<Sequence> seq);
  // Plans one step into |plan|; returns the scheduled sequences (empty when idle).
  std::vector<ScheduledSeq> plan(StepPlan* plan);
  // After the step ran: marks the computed tokens.
  void commit(const std::vector<ScheduledSeq>& scheduled);
  // The planned step took |ms| (the engine times it): fits the step cost model.
  void observe(double ms);
  // Frees the blocks of a finished or cancelled sequence and forgets it.
  void finish(RequestId id);
  Sequence* find(RequestId id);
  // Adds |child| as a fork of running sequence |parent|: it shares all of the parent's blocks
  // (retained) and its computed state. Returns false when |parent| is not running.
  bool fork(RequestId parent, std::unique_ptr<Sequence> child);
  KvUsage kv_usage() const;

  bool idle() const { return running_.empty() && waiting_.empty(); }
  // The sequence to give up on when a step could schedule nothing although work is left: the
  // running one that cannot grow (it is alone and the pool is exhausted), else the head of the
  // queue. 0 when idle.
  RequestId blocked() const;
  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  const SchedulerStats& stats() const { return stats_; }
  const BlockPool& pool() const { return pool_; }

 private:
  bool ensure_blocks(Sequence& s, int32_t n_tokens);
  bool copy_on_write(Sequence& s);
  void match_prefix(Sequence& s);
  void register_full_blocks(Sequence& s);
  void schedule_running(std::vector<ScheduledSeq>* out, int32_t* budget);
  void admit_waiting(std::vector<ScheduledSeq>* out, int32_t* budget);
  void start_cost_limit();
  int32_t chunk_size(const Sequence& s, int32_t budget);
  void take(std::vector<ScheduledSeq>* out, int32_t* budget, Sequence& s, int32_t n);
  void free_blocks(Sequence& s);
  void preempt(Sequence& s);
  bool swap_out(Sequence& s);
  bool swap_in(Sequence& s, int32_t n_new);
  Sequence* pick_victim(const Sequence* keep);
  void fill(StepPlan* plan, const std::vector<ScheduledSeq>& scheduled) const;

  SchedulerConfig cfg_;
  BlockPool& pool_;
  std::deque<std::unique_ptr<Sequence>> waiting_;   // by (priority, arrival)
  std::vector<std::unique_ptr<Sequence>> running_;  // have blocks
  SchedulerStats stats_;
  std::vector<std::pair<int32_t, int32_t>> copies_;  // this step's copy-on-write (src, dst)
  std::vector<std::pair<int32_t, int32_t>> swap_out_, swap_in_;  // this step's swaps
  std::vector<int32_t> host_free_;                   // free host slots
  StepCostModel cost_;
  // This step's cost limit (0: none), the shape chunks are sized against (the running decodes,
  // then each chunk taken) and whether a prefill chunk was taken; the planned step's shape.
  double limit_ms_ = 0;
  StepShape limit_shape_;
  bool prefill_in_step_ = false;
  int32_t prev_prefill_tokens_ = 0;  // prefill tokens of the latest step that had any
  int32_t steps_since_decode_only_ = 0;  // steps with decodes since one without prefill
  bool probe_ = false;               // this step leaves prefill out (cost_probe_every)
  StepShape planned_;
};

}  // namespace tessera

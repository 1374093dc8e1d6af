// Proposer: drafts the next tokens of running sequences for speculative decoding. The engine asks
// it once per step, before planning, for every sequence that speculates this step; the target
// model then scores each sequence's pending token and its draft in one step (k + 1 query rows,
// the varlen path chunked prefill uses) and core/sched/spec_verify.h accepts a prefix of the
// draft by rejection sampling, so the output follows the target's distribution exactly.
// Implementations: NgramProposer (prompt lookup, core/sched/ngram_proposer.h) and
// DraftModelProposer (a smaller model with its own KV cache, core/sched/draft_proposer.h), which
// returns the draft's distributions in |q| when it samples (a one-hot draft, as n-gram's or a
// greedy draft model's, leaves it empty) and keeps per-sequence state until release().
// Not thread-safe: called on the engine thread.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/sched/sampler.h"

namespace tessera {

struct DraftRequest {
  int64_t seq = 0;                    // the scheduler's sequence id
  std::span<const int32_t> tokens;    // prompt + generated; the last one is not computed yet
  int32_t k = 0;                      // draft at most this many tokens (> 0)
  // The request's sampling settings: a proposer that samples its drafts draws them from its own
  // distribution under the same penalties, temperature, top-k, top-p and min-p (greedy: the
  // argmax), with its own random stream seeded from |sampling.seed|.
  SamplingParams sampling;
  // Outputs: the drafted tokens (0..k of them), and either nothing (a one-hot q: the draft is
  // certain) or the draft's probabilities, [draft.size(), vocab] row-major, each row a
  // distribution over the vocabulary from which that draft token was sampled.
  std::vector<int32_t> draft;
  std::vector<float> q;
};

// A proposer's own counters (a draft model's; zero for n-gram lookup), for --stats and /metrics.
struct ProposerStats {
  int64_t forwards = 0;         // draft model steps run
  int64_t catch_up_tokens = 0;  // context tokens fed to the draft (prompts, accepted tokens)
  int64_t draft_tokens = 0;     // tokens drafted
  int64_t truncations = 0;      // calls that dropped draft K/V past a rejection
  int64_t out_of_blocks = 0;    // drafts skipped because the draft's pool was full
  int64_t failures = 0;         // calls whose forward failed
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Fills each request's draft (and q). May leave a draft empty (nothing worth proposing).
  virtual void propose(std::span<DraftRequest> batch) = 0;
  // |seq| finished or was preempted (the engine calls it for both): drop any state kept for it.
  virtual void release(int64_t seq) { (void)seq; }
  virtual const char* name() const = 0;
  virtual ProposerStats stats() const { return {}; }
};

}  // namespace tessera

// DraftModelProposer: speculative drafts from a second, smaller model with the target's
// vocabulary. The draft runs through the same ModelRunner interface as the target (core stays
// model-agnostic: the CLI or server loads the draft Model and hands it in) with its own KvCache
// and its own KvManager over that cache's pool: it does not share the target's block manager.
//
// Per sequence it remembers the tokens whose K/V its cache holds. A call first catches each
// sequence up (the prompt on the first call, then the tokens accepted since the last call; after
// a rejection the draft's K/V is truncated back to the common prefix, KvManager::truncate), in
// chunked steps that batch every sequence of the call, then runs k - 1 more one-token steps, one
// forward per draft position for the whole batch, drawing draft token j from the logits of the
// step before. A greedy request drafts the argmax and leaves q empty (one-hot); a sampled one
// draws from the draft's distribution after the request's own penalties, temperature, top-k,
// top-p and min-p (Sampler::candidates, as the target's p) with a random stream per sequence
// seeded from the request's seed, and returns those rows as q, so rejection sampling keeps the
// output distributed exactly as the target's.
//
// When the draft's pool cannot hold a sequence's context plus its draft, that sequence gets no
// draft this step and its draft state is dropped (it catches up from scratch later). A failed
// forward drops the drafts and state of the whole call (last_error() says why); the engine then
// decodes without drafts. Not thread-safe: called on the engine thread.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/kv/kv_manager.h"
#include "core/sched/proposer.h"
#include "core/sched/sampler.h"
#include "core/sched/step_plan.h"
#include "core/status.h"

namespace tessera {

struct DraftModelConfig {
  // The most tokens and sequences one draft forward takes (the draft's step buffers, as the
  // target's LoadOptions::max_batch_tokens / max_seqs): a long catch-up runs in chunks.
  int32_t max_batch_tokens = 512;
  int32_t max_seqs = 64;
};

class DraftModelProposer final : public Proposer {
 public:
  // |draft| must produce logits over |target_vocab| tokens: another vocabulary size is an
  // InvalidArgument naming both. |kv| is the draft's own cache (Model::create_kv_cache of the
  // draft); sizing it for as many tokens as the target's cache keeps drafts from running out.
  static Result<std::unique_ptr<DraftModelProposer>> create(std::shared_ptr<ModelRunner> draft, std::unique_ptr<KvCache> kv,
                                                            int32_t target_vocab, DraftModelConfig cfg = {});

  void propose(std::span<DraftRequest> batch) override;
  void release(int64_t seq) override;
  const char* name() const override { return "draft"; }

  ProposerStats stats() const override { return stats_; }
  const Status& last_error() const { return last_error_; }
  // Tokens of |seq| whose K/V the draft's cache holds (0 for an unknown one).
  int32_t held_tokens(int64_t seq) const;
  // Sequences with draft state, and the draft pool's free blocks (tests: release frees).
  size_t n_tracked() const { return seqs_.size(); }
  int32_t n_free_blocks() const { return kv_->pool().n_free(); }

 private:
  struct SeqState {
    std::vector<int32_t> held;         // the tokens whose K/V the draft's cache holds, in order
    std::unique_ptr<Sampler> sampler;  // the draft's own random stream (sampled requests)
  };
  // One sequence's share of a call.
  struct Work {
    DraftRequest* req;
    SeqState* state;
    int32_t done;                 // tokens of req->tokens computed by the draft so far
    int32_t k;                    // tokens to draft
    std::vector<int32_t> hist;    // tokens + drafts so far (the penalties' history)
    std::vector<float> logits;    // [vocab] the draft's logits for the next draft token
  };
  DraftModelProposer(std::shared_ptr<ModelRunner> draft, std::unique_ptr<KvCache> kv, DraftModelConfig cfg);

  // Picks the sequences of |batch| that can draft, truncates and grows their draft K/V.
  std::vector<Work> prepare(std::span<DraftRequest> batch);
  // Feeds every sequence's uncomputed tokens; leaves each one's last logits row in Work::logits.
  Status catch_up(std::vector<Work>& work);
  // Draws the draft tokens, feeding each one back but the last.
  Status draft_tokens(std::vector<Work>& work);
  // Draws draft token j of |w| from w.logits into its request (and q for a sampled one).
  void draw(Work& w);
  // Appends |n| tokens of |seq| starting at position |start| to |plan| (block table included).
  void add_rows(StepPlan* plan, int64_t seq, const int32_t* tokens, int32_t n, int32_t start, bool wants_logits);
  // Lays out |plan|'s block tables (from plan_tables_), runs it and returns its logits rows.
  Status run(StepPlan& plan, std::vector<float>* logits);

  std::shared_ptr<ModelRunner> model_;
  std::unique_ptr<KvCache> kv_;
  KvManager kv_mgr_;
  DraftModelConfig cfg_;
  int32_t vocab_;
  std::unordered_map<int64_t, SeqState> seqs_;
  std::vector<std::vector<BlockId>> plan_tables_;  // the plan being built: each sequence's block table
  ProposerStats stats_;
  Status last_error_;
};

}  // namespace tessera

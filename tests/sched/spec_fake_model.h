// A tiny deterministic model for speculative decoding tests: a second-order Markov chain over
// kVocab tokens whose transition also depends on the position modulo kPhases. The logits of a
// row are a fixed random table of (position % kPhases, the token before, the token): the token
// before is read back from the KV cache through the block table, so a wrong slot, a rejected
// draft left in the cache or a lost accepted one changes the output. The phase makes an n-gram
// draft (copied from another position) differ in distribution from the target's, as real drafts
// do; without it a draft would be an earlier sample of the very same distribution.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/kv/kv_cache.h"
#include "core/sched/draft_proposer.h"
#include "core/reference/reference.h"
#include "core/sched/engine.h"
#include "core/sched/grammar.h"

namespace tessera::spec_test {

constexpr int32_t kVocab = 6;
constexpr int32_t kPhases = 3;

class MarkovModel : public ModelRunner {
 public:
  // The table of |seed| (7: the target of every test), each entry plus uniform(-noise, noise)
  // from |noise_seed|: a draft model "distilled" from the target, close to it but not equal.
  explicit MarkovModel(uint32_t seed = 7, float noise = 0.0f, uint32_t noise_seed = 1);
  int32_t vocab_size() const override { return kVocab; }
  int32_t context_length() const override { return 4096; }
  Status forward(const StepPlan& p, KvCache& kv, std::vector<float>* logits) override;
  const float* row(int32_t pos, int32_t before, int32_t token) const {
    return &table_[size_t(((pos % phases) * kVocab + before) * kVocab + token) * kVocab];
  }
  int32_t phases = kPhases;  // 1: a plain second-order chain (greedy runs then cycle soon)
  int64_t rows_scored = 0;

 private:
  std::vector<float> table_;  // [kPhases, kVocab (before), kVocab (token), kVocab (next)]
};

// Drafts the model's own greedy continuation (unconstrained: under a grammar it may draft tokens
// the grammar forbids), so every draft is accepted under greedy sampling without a grammar: each
// step emits k + 1 tokens, and a stop condition lands inside a step for sure.
class OracleProposer final : public Proposer {
 public:
  explicit OracleProposer(const MarkovModel& m) : m_(m) {}
  void propose(std::span<DraftRequest> batch) override;
  const char* name() const override { return "oracle"; }
  int64_t drafted = 0;  // tokens proposed

 private:
  const MarkovModel& m_;
};

// Token t reads as the letter 'a' + t; |eog| (>= 0) ends generation.
TextCodec letter_codec(int32_t eog = -1);
// An engine config that speculates with |proposer| (k drafts) in every step: no auto-off rules,
// the tests decide when to speculate (they may turn the cost gate back on).
EngineConfig spec_config(std::shared_ptr<Proposer> proposer, int32_t k);

struct SpecHarness {
  // |proposer| null: no speculation. Stop checks see token t as the letter 'a' + t; |eog| (>= 0)
  // ends generation.
  SpecHarness(std::shared_ptr<Proposer> proposer, int32_t k, int n_blocks = 512, int32_t eog = -1);
  struct Output {
    std::vector<int32_t> tokens;
    std::string text;
    FinishReason finish = FinishReason::kNone;
  };
  RequestId submit(const std::vector<int32_t>& prompt, int max_tokens, SamplingParams sp, std::vector<std::string> stop = {},
                   int32_t spec_k = -1);
  // Submits every prompt at once, runs the engine until idle and returns each one's output, in order.
  std::vector<Output> run(const std::vector<std::vector<int32_t>>& prompts, int max_tokens, SamplingParams sp,
                          const std::vector<std::string>& stop = {});

  ref::ReferenceDevice dev;
  MarkovModel model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Engine> engine;
  std::map<RequestId, Output> out;
  std::shared_ptr<const Grammar> grammar;  // given to every request submitted (null: none)
};

// A grammar over the fake's tokens: a token may not repeat the one before it (the first token of
// the output may be anything), and after |limit| tokens (>= 0) nothing may follow: a dead end.
class NoRepeatGrammar final : public Grammar {
 public:
  explicit NoRepeatGrammar(int32_t limit = -1) : limit_(limit) {}
  int32_t fill_mask(uint32_t* mask) override;
  bool accept(int32_t token) override;
  void rollback(int32_t n) override { accepted_.resize(accepted_.size() - size_t(n)); }
  std::unique_ptr<Grammar> fork() const override { return std::make_unique<NoRepeatGrammar>(*this); }
  bool terminated() const override { return false; }
  int32_t vocab_size() const override { return kVocab; }

 private:
  bool allows(int32_t token) const;
  int32_t limit_;
  std::vector<int32_t> accepted_;
};

std::vector<int32_t> random_prompt(int len, uint32_t seed);
// |n| random prompts of lengths len, len + 1, ..., from seeds first_seed, first_seed + 1, ...
std::vector<std::vector<int32_t>> random_prompts(int n, int len, uint32_t first_seed);

// A DraftModelProposer over |draft| (a MarkovModel, or anything that reads the fake's cache
// layout) with its own cache of |n_blocks| blocks on a reference device of its own.
std::shared_ptr<DraftModelProposer> markov_draft(std::shared_ptr<ModelRunner> draft, int n_blocks = 512);
// The fake's KV cache layout: one layer, one head of width 2, f32, blocks of 4 slots.
std::unique_ptr<KvCache> markov_kv(Device& dev, int n_blocks);

}  // namespace tessera::spec_test

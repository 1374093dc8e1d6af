// DraftModelProposer (core/sched/draft_proposer.h) on the Markov fake: the draft is a second
// MarkovModel whose table is the target's plus noise, so it agrees with the target often but not
// always. The fake reads the token before each position back from the draft's own cache through
// its block tables, so a wrong slot, a stale rejected draft or a lost catch-up token changes the
// draft (and so the acceptance counts these tests pin, not only the output).
#include <gtest/gtest.h>

#include <numeric>

#include "tests/sched/spec_fake_model.h"

namespace tessera::spec_test {
namespace {

std::shared_ptr<MarkovModel> noisy_draft(float noise = 1.0f) { return std::make_shared<MarkovModel>(7, noise, 11); }



TEST(DraftProposer, GreedyOutputEqualsNonSpeculativeWithAcceptsAndRejects) {
  for (float penalty : {1.0f, 1.3f}) {
    SamplingParams sp = SamplingParams::greedy();
    sp.repetition_penalty = penalty;  // the draft's rows see its own earlier drafts as history
    auto draft = markov_draft(noisy_draft());
    SpecHarness base(nullptr, 0), spec(draft, 4);
    const auto ps = random_prompts(6, 9, 300);  // decoded together: the draft's steps batch all six
    const auto want = base.run(ps, 60, sp);
    const auto got = spec.run(ps, 60, sp);
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i << " penalty " << penalty;
      EXPECT_EQ(got[i].finish, FinishReason::kLength);
    }
    const SpecStats st = spec.engine->stats().spec;
    EXPECT_GT(st.accepted, 0) << "no draft was accepted";
    EXPECT_LT(st.accepted, st.drafted) << "no draft was rejected: truncation of the draft's KV is not exercised";
    EXPECT_GT(draft->stats().truncations, 0);
    EXPECT_LT(spec.engine->stats().sched.steps, base.engine->stats().sched.steps);
    // Every finished sequence released its draft state and blocks.
    EXPECT_EQ(draft->n_tracked(), 0u);
    EXPECT_EQ(draft->n_free_blocks(), 512);
    EXPECT_EQ(draft->stats().failures, 0) << draft->last_error().to_string();
    std::printf("penalty %.1f: drafted %lld, accepted %lld (%.1f%%); draft forwards %lld\n", penalty,
                static_cast<long long>(st.drafted), static_cast<long long>(st.accepted), 100.0 * st.acceptance_rate(),
                static_cast<long long>(draft->stats().forwards));
  }
}

TEST(DraftProposer, TheTargetItselfAsDraftIsAlwaysAcceptedUnderGreedy) {
  // The same table: the draft's argmax is the target's, so all k drafts are accepted. Catch-up
  // then only feeds the last draft token and the bonus token, which this pins via held_tokens.
  auto draft = markov_draft(std::make_shared<MarkovModel>());
  SpecHarness spec(draft, 4);
  const auto got = spec.run(random_prompts(1, 10, 300), 41, SamplingParams::greedy());
  ASSERT_EQ(got[0].tokens.size(), 41u);
  const SpecStats st = spec.engine->stats().spec;
  EXPECT_EQ(st.accepted, st.drafted);
  // The prefill samples token 1; then 8 steps of 4 drafts + 1 bonus token reach 41.
  EXPECT_EQ(st.drafted, 32);
  // The prompt and the first token once, then per later call the last draft token and the bonus.
  EXPECT_EQ(draft->stats().catch_up_tokens, 11 + 7 * 2);
  EXPECT_EQ(draft->stats().truncations, 0);
}

TEST(DraftProposer, SampledDraftsReturnTheirDistributionRows) {
  auto draft = markov_draft(noisy_draft());
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 4;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 5;
  const auto prompt = random_prompt(7, 1);
  DraftRequest r{1, prompt, 3, sp, {}, {}};
  draft->propose(std::span<DraftRequest>(&r, 1));
  ASSERT_EQ(r.draft.size(), 3u);
  ASSERT_EQ(r.q.size(), 3u * size_t(kVocab));
  for (size_t i = 0; i < 3; ++i) {
    const float* q = r.q.data() + i * size_t(kVocab);
    EXPECT_NEAR(std::accumulate(q, q + kVocab, 0.0), 1.0, 1e-5) << "row " << i;
    EXPECT_GT(q[r.draft[i]], 0.0f) << "row " << i << ": the drafted token must have been possible";
    EXPECT_EQ(std::count(q, q + kVocab, 0.0f), kVocab - 4) << "row " << i << ": top-k 4 leaves 4 tokens";
  }
  EXPECT_EQ(draft->held_tokens(1), 7 + 2);  // the context and every draft token but the last
  // Greedy: q stays empty (a one-hot draft).
  DraftRequest g{2, prompt, 3, SamplingParams::greedy(), {}, {}};
  draft->propose(std::span<DraftRequest>(&g, 1));
  EXPECT_EQ(g.draft.size(), 3u);
  EXPECT_TRUE(g.q.empty());
  // The same seed drafts the same tokens (determinism of the draft's own stream).
  auto again = markov_draft(noisy_draft());
  DraftRequest r2{1, prompt, 3, sp, {}, {}};
  again->propose(std::span<DraftRequest>(&r2, 1));
  EXPECT_EQ(r2.draft, r.draft);
  EXPECT_EQ(r2.q, r.q);
  draft->release(1);
  draft->release(2);
  EXPECT_EQ(draft->n_tracked(), 0u);
  EXPECT_EQ(draft->n_free_blocks(), 512);
}

// Counts the releases the engine sends its proposer.
class CountingProposer final : public Proposer {
 public:
  explicit CountingProposer(std::shared_ptr<DraftModelProposer> p) : p_(std::move(p)) {}
  void propose(std::span<DraftRequest> batch) override { p_->propose(batch); }
  void release(int64_t seq) override {
    ++releases;
    p_->release(seq);
  }
  const char* name() const override { return "counting"; }
  int64_t releases = 0;

 private:
  std::shared_ptr<DraftModelProposer> p_;
};

TEST(DraftProposer, PreemptionReleasesTheDraftStateAndOutputStaysTheSame) {
  // 24 target blocks of 4 slots for 5 sequences of up to 12 + 40 tokens: preemptions happen.
  auto draft = markov_draft(noisy_draft());
  auto counting = std::make_shared<CountingProposer>(draft);
  SpecHarness base(nullptr, 0, 24), spec(counting, 4, 24);
  const auto ps = random_prompts(5, 8, 300);
  const auto want = base.run(ps, 40, SamplingParams::greedy());
  const auto got = spec.run(ps, 40, SamplingParams::greedy());
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i;
  const int64_t preemptions = spec.engine->stats().sched.preemptions;
  EXPECT_GT(preemptions, 0) << "the pool was big enough: preemption is not exercised";
  EXPECT_EQ(counting->releases, int64_t(ps.size()) + preemptions) << "one release per finish and per preemption";
  EXPECT_EQ(draft->n_tracked(), 0u);
  EXPECT_EQ(draft->n_free_blocks(), 512);
}

TEST(DraftProposer, ADraftPoolTooSmallSkipsDraftsButNotTokens) {
  // 3 draft blocks (12 slots) cannot hold a 20-token prompt: no drafts, same output.
  auto draft = markov_draft(noisy_draft(), 3);
  SpecHarness base(nullptr, 0), spec(draft, 4);
  const auto ps = random_prompts(1, 20, 300);
  EXPECT_EQ(spec.run(ps, 12, SamplingParams::greedy())[0].tokens, base.run(ps, 12, SamplingParams::greedy())[0].tokens);
  EXPECT_EQ(spec.engine->stats().spec.drafted, 0);
  EXPECT_GT(draft->stats().out_of_blocks, 0);
  EXPECT_EQ(draft->n_free_blocks(), 3);
}

// A draft whose forwards fail from the |fail_from|-th on.
class FailingMarkov final : public MarkovModel {
 public:
  explicit FailingMarkov(int fail_from) : MarkovModel(7, 1.0f, 11), fail_from_(fail_from) {}
  Status forward(const StepPlan& p, KvCache& kv, std::vector<float>* logits) override {
    if (++calls_ >= fail_from_) return Internal("injected draft failure");
    return MarkovModel::forward(p, kv, logits);
  }

 private:
  int fail_from_, calls_ = 0;
};

TEST(DraftProposer, AFailedDraftForwardDropsTheDraftsButNotTheOutput) {
  auto draft = markov_draft(std::make_shared<FailingMarkov>(10));
  SpecHarness base(nullptr, 0), spec(draft, 4);
  const auto ps = random_prompts(3, 9, 300);
  const auto want = base.run(ps, 30, SamplingParams::greedy());
  const auto got = spec.run(ps, 30, SamplingParams::greedy());
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i;
  EXPECT_GT(spec.engine->stats().spec.drafted, 0) << "drafts before the failure";
  EXPECT_GT(draft->stats().failures, 0);
  EXPECT_NE(draft->last_error().to_string().find("injected draft failure"), std::string::npos);
  EXPECT_EQ(draft->n_tracked(), 0u);
  EXPECT_EQ(draft->n_free_blocks(), 512);
}

class WideMarkov final : public MarkovModel {
 public:
  int32_t vocab_size() const override { return kVocab + 1; }
};

TEST(DraftProposer, AVocabularyMismatchIsAClearError) {
  ref::ReferenceDevice dev;
  auto p = DraftModelProposer::create(std::make_shared<WideMarkov>(), markov_kv(dev, 8), kVocab);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  const std::string msg = p.status().to_string();
  EXPECT_NE(msg.find("vocabulary of 7 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("target's has 6"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tessera::spec_test

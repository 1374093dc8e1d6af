// Speculative decoding under a grammar (issue 17: "masks combine with speculative decoding, one
// mask per draft position"), on the Markov fake with NoRepeatGrammar: greedy output with drafts
// equals the output without them for n-gram and draft-model proposers, the grammar holds in every
// output, one-hot drafts are cut at the first token the grammar forbids, and a dead end inside a
// draft ends the request after exactly the tokens the non-speculative run emits. The sampled
// distribution under a grammar is spec_distribution_test.cpp's.
#include <gtest/gtest.h>

#include <string>

#include "core/sched/ngram_proposer.h"
#include "tests/sched/spec_fake_model.h"

namespace tessera::spec_test {
namespace {

// The n-gram proposer, or a draft model: the target's table plus uniform noise of |noise|.
std::shared_ptr<Proposer> proposer(const std::string& which, float noise) {
  if (which == "ngram") return std::make_shared<NgramProposer>();
  return markov_draft(std::make_shared<MarkovModel>(7, noise, 5));
}

bool has_repeat(const std::vector<int32_t>& t) {
  for (size_t i = 1; i < t.size(); ++i)
    if (t[i] == t[i - 1]) return true;
  return false;
}

TEST(SpecGrammar, GreedyUnderAGrammarEqualsNonSpeculativeForEveryProposer) {
  const auto ps = random_prompts(6, 9, 300);
  SpecHarness free_run(nullptr, 0);
  const auto unconstrained = free_run.run(ps, 60, SamplingParams::greedy());
  int repeats = 0;
  for (const auto& o : unconstrained) repeats += has_repeat(o.tokens);
  ASSERT_GT(repeats, 0) << "the fake never repeats a token under greedy: the grammar would change nothing";

  SpecHarness base(nullptr, 0);
  base.grammar = std::make_shared<NoRepeatGrammar>();
  const auto want = base.run(ps, 60, SamplingParams::greedy());
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_FALSE(has_repeat(want[i].tokens)) << "prompt " << i;

  for (const char* which : {"ngram", "draft"}) {
    SpecHarness spec(proposer(which, 1.0f), 4);
    spec.grammar = base.grammar;
    const auto got = spec.run(ps, 60, SamplingParams::greedy());
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << which << ", prompt " << i;
      EXPECT_EQ(got[i].finish, FinishReason::kLength) << which;
    }
    const SpecStats st = spec.engine->stats().spec;
    EXPECT_GT(st.accepted, 0) << which << ": no draft accepted under the grammar";
    EXPECT_LT(st.accepted, st.drafted) << which;
    EXPECT_LT(spec.engine->stats().sched.steps, base.engine->stats().sched.steps) << which;
    EXPECT_EQ(spec.kv->pool().n_free(), 512) << which;
    // One mask per scored row: more masks than tokens, since rejected rows are masked too.
    EXPECT_GT(spec.engine->stats().grammar.masks, base.engine->stats().grammar.masks / 2) << which;
  }
}

TEST(SpecGrammar, OneHotDraftsAreCutAtTheFirstTokenTheGrammarForbids) {
  // The oracle drafts the unconstrained greedy continuation, which repeats tokens: those drafts
  // are cut before the repeat, so fewer tokens are verified than proposed, and output is unchanged.
  const auto ps = random_prompts(4, 9, 300);
  SpecHarness base(nullptr, 0);
  base.grammar = std::make_shared<NoRepeatGrammar>();
  const auto want = base.run(ps, 50, SamplingParams::greedy());
  SpecHarness spec(nullptr, 4);
  auto oracle = std::make_shared<OracleProposer>(spec.model);
  spec.engine = std::make_unique<Engine>(spec.model, *spec.kv, letter_codec(), spec_config(oracle, 4));
  spec.grammar = base.grammar;
  const auto got = spec.run(ps, 50, SamplingParams::greedy());
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i;
  const SpecStats st = spec.engine->stats().spec;
  EXPECT_GT(st.accepted, 0);
  EXPECT_LT(st.drafted, oracle->drafted) << "no draft was cut by the grammar";
}

TEST(SpecGrammar, ADeadEndInsideADraftEndsTheRequestAfterTheSameTokens) {
  // Limits 1..14 put the dead end at every position of a k = 4 draft (and at a draft's start).
  for (int32_t limit = 1; limit <= 14; ++limit) {
    const auto ps = random_prompts(3, 9, 400);
    SpecHarness base(nullptr, 0);
    base.grammar = std::make_shared<NoRepeatGrammar>(limit);
    const auto want = base.run(ps, 40, SamplingParams::greedy());
    for (const char* which : {"ngram", "draft"}) {
      SpecHarness spec(proposer(which, 0.2f), 4);
      spec.grammar = base.grammar;
      const auto got = spec.run(ps, 40, SamplingParams::greedy());
      for (size_t i = 0; i < ps.size(); ++i) {
        ASSERT_EQ(int32_t(want[i].tokens.size()), limit);
        EXPECT_EQ(want[i].finish, FinishReason::kGrammarDeadEnd);
        EXPECT_EQ(got[i].tokens, want[i].tokens) << which << ", limit " << limit << ", prompt " << i;
        EXPECT_EQ(got[i].finish, FinishReason::kGrammarDeadEnd) << which << ", limit " << limit;
      }
      EXPECT_EQ(spec.kv->pool().n_free(), 512) << which << ", limit " << limit;
      EXPECT_EQ(spec.engine->stats().grammar.dead_ends, int64_t(ps.size())) << which << ", limit " << limit;
    }
  }
}

}  // namespace
}  // namespace tessera::spec_test

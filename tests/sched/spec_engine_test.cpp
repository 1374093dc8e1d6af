// The engine with n-gram speculation on the Markov fake (tests/sched/spec_fake_model.h): greedy
// output equals non-speculative output, stop conditions hold inside a multi-token step, rejected
// drafts never reach the prefix cache or its events, and the auto-off rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/sched/ngram_proposer.h"
#include "tests/sched/spec_fake_model.h"

namespace tessera::spec_test {
namespace {

std::shared_ptr<Proposer> ngram() { return std::make_shared<NgramProposer>(); }

TEST(SpecEngine, GreedyOutputEqualsNonSpeculativeAndDraftsAreAccepted) {
  for (float penalty : {1.0f, 1.3f}) {
    SamplingParams sp = SamplingParams::greedy();
    sp.repetition_penalty = penalty;  // the penalties of each draft row see the accepted drafts before it
    SpecHarness base(nullptr, 0), spec(ngram(), 4);
    const auto ps = random_prompts(6, 9, 100);
    const auto want = base.run(ps, 60, sp);
    const auto got = spec.run(ps, 60, sp);
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "prompt " << i << " penalty " << penalty;
      EXPECT_EQ(got[i].finish, FinishReason::kLength);
    }
    const SpecStats st = spec.engine->stats().spec;
    EXPECT_GT(st.accepted, 0) << "no draft was accepted: the test would not exercise multi-token steps";
    EXPECT_LT(st.accepted, st.drafted) << "no draft was rejected: the test would not exercise the rejection path";
    EXPECT_LT(spec.engine->stats().sched.steps, base.engine->stats().sched.steps);
    EXPECT_EQ(spec.kv->pool().n_free(), 512) << "every block, draft slots included, returns to the pool";
  }
}

// |h|'s engine again, drafting with the oracle.
std::unique_ptr<Engine> oracle_engine(SpecHarness& h, int32_t k, int32_t eog = -1) {
  return std::make_unique<Engine>(h.model, *h.kv, letter_codec(eog), spec_config(std::make_shared<OracleProposer>(h.model), k));
}

TEST(SpecEngine, MaxTokensEosAndStopStringsHoldInsideAMultiTokenStep) {
  const auto ps = random_prompts(8, 11, 100);
  SpecHarness probe(nullptr, 0);
  const auto free_run = probe.run(ps, 40, SamplingParams::greedy());
  // max_tokens that end in the middle of a step, EOS, and a stop string taken from the output.
  for (int max_tokens : {1, 2, 7, 13}) {
    SpecHarness base(nullptr, 0), spec(nullptr, 5);
    spec.engine = oracle_engine(spec, 5);
    const auto want = base.run(ps, max_tokens, SamplingParams::greedy());
    const auto got = spec.run(ps, max_tokens, SamplingParams::greedy());
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "max_tokens " << max_tokens;
      EXPECT_EQ(int(got[i].tokens.size()), max_tokens);
    }
  }
  {
    // The end-of-generation token and prompt: the pair whose first appearance is latest among
    // 64 greedy runs, so that run speculates (and accepts drafts) before it ends.
    const auto many = random_prompts(64, 11, 100);
    SpecHarness scan(nullptr, 0);
    scan.model.phases = 1;
    const auto scanned = scan.run(many, 40, SamplingParams::greedy());
    int32_t eog = -1;
    size_t latest = 0, which = 0;
    for (size_t i = 0; i < many.size(); ++i)
      for (int32_t t = 0; t < kVocab; ++t) {
        const auto& toks = scanned[i].tokens;
        const size_t at = size_t(std::find(toks.begin(), toks.end(), t) - toks.begin());
        if (at < toks.size() && at > latest) { latest = at; eog = t; which = i; }
      }
    ASSERT_GE(latest, 8u);
    const std::vector<std::vector<int32_t>> eog_prompts = {many[which], ps[0], ps[1], ps[2]};
    SpecHarness base(nullptr, 0, 512, eog), spec(nullptr, 5, 512, eog);
    base.model.phases = spec.model.phases = 1;
    spec.engine = oracle_engine(spec, 5, eog);
    const auto want = base.run(eog_prompts, 40, SamplingParams::greedy());
    const auto got = spec.run(eog_prompts, 40, SamplingParams::greedy());
    EXPECT_EQ(want[0].finish, FinishReason::kStop);
    for (size_t i = 0; i < eog_prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "eog, prompt " << i;
      EXPECT_EQ(got[i].text, want[i].text);
      EXPECT_EQ(got[i].finish, want[i].finish);
    }
    const SpecStats st = spec.engine->stats().spec;
    EXPECT_EQ(st.accepted, st.drafted) << "the oracle's drafts are always accepted";
    EXPECT_GT(st.accepted, 0);
  }
  {
    const std::string stop = free_run[0].text.substr(25, 3);
    SpecHarness base(nullptr, 0), spec(nullptr, 5);
    spec.engine = oracle_engine(spec, 5);
    const auto want = base.run(ps, 40, SamplingParams::greedy(), {stop});
    const auto got = spec.run(ps, 40, SamplingParams::greedy(), {stop});
    EXPECT_EQ(want[0].finish, FinishReason::kStop);
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(got[i].text, want[i].text) << "stop '" << stop << "', prompt " << i;
      EXPECT_EQ(got[i].tokens, want[i].tokens);
      EXPECT_EQ(got[i].finish, want[i].finish);
    }
  }
}

// Records the blocks the prefix cache reports as stored.
struct StoredBlocks : BlockEventSink {
  void on_block_stored(BlockHash, BlockHash, std::span<const int32_t> tokens, int32_t) override {
    blocks.emplace_back(tokens.begin(), tokens.end());
  }
  void on_block_removed(BlockHash) override {}
  std::vector<std::vector<int32_t>> blocks;
};

TEST(SpecEngine, RejectedDraftsAreNeverHashedOrPublished) {
  SpecHarness h(ngram(), 6, 2048);
  StoredBlocks sink;
  h.kv->pool().set_event_sink(&sink);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 9;
  const auto ps = random_prompts(12, 10, 100);
  const auto outs = h.run(ps, 50, sp);
  // Every stored block is a block-aligned slice of some request's prompt + output.
  std::set<std::vector<int32_t>> real;
  for (size_t i = 0; i < ps.size(); ++i) {
    std::vector<int32_t> all = ps[i];
    all.insert(all.end(), outs[i].tokens.begin(), outs[i].tokens.end());
    for (size_t b = 0; b + 4 <= all.size(); b += 4) real.insert(std::vector<int32_t>(all.begin() + long(b), all.begin() + long(b + 4)));
  }
  ASSERT_FALSE(sink.blocks.empty());
  for (const auto& b : sink.blocks) EXPECT_TRUE(real.count(b)) << "a stored block holds tokens no request produced there";
  const SpecStats st = h.engine->stats().spec;
  EXPECT_GT(st.drafted - st.accepted, 100) << "too few rejections to exercise truncation";
  EXPECT_EQ(h.kv->pool().n_used(), 0);
  h.kv->pool().set_event_sink(nullptr);
}

TEST(SpecEngine, PerRequestOffAndAutoOffAboveTheBatchLimit) {
  {
    SpecHarness h(ngram(), 4);
    h.submit(random_prompt(10, 1), 40, SamplingParams::greedy(), {}, /*spec_k=*/0);
    ASSERT_TRUE(h.engine->run_until_idle().ok());
    EXPECT_EQ(h.engine->stats().spec.drafted, 0) << "spec_k = 0 turns speculation off for the request";
  }
  {
    SpecHarness h(ngram(), 4);
    h.submit(random_prompt(10, 1), 40, SamplingParams::greedy(), {}, /*spec_k=*/2);
    ASSERT_TRUE(h.engine->run_until_idle().ok());
    const SpecStats st = h.engine->stats().spec;
    EXPECT_GT(st.drafted, 0);
    EXPECT_LE(st.drafted, 2 * st.verifications) << "at most spec_k draft tokens per step";
  }
  {
    SpecHarness h(ngram(), 4);
    EngineConfig ec;
    ec.spec.proposer = ngram();
    ec.spec.max_batch = 3;
    ec.spec.cost_gate = false;
    Engine e(h.model, *h.kv, TextCodec{}, ec);
    for (int i = 0; i < 4; ++i) {
      GenerationRequest r;
      r.prompt = random_prompt(10, uint32_t(i));
      r.sampling = SamplingParams::greedy();
      r.max_tokens = 10 + 10 * i;  // they finish at different steps
      ASSERT_TRUE(e.submit(std::move(r)).ok());
    }
    ASSERT_TRUE(e.run_until_idle().ok());
    const SpecStats st = e.stats().spec;
    EXPECT_GT(st.steps_off_batch, 0) << "4 decodes > max_batch 3: no drafts";
    EXPECT_GT(st.steps, 0) << "once 3 or fewer decode, drafts come back";
  }
}


// The oracle, counting the calls the engine makes to it.
class CountingOracle final : public Proposer {
 public:
  explicit CountingOracle(const MarkovModel& m) : oracle_(m) {}
  void propose(std::span<DraftRequest> batch) override {
    ++calls;
    oracle_.propose(batch);
  }
  const char* name() const override { return "counting oracle"; }
  int calls = 0;

 private:
  OracleProposer oracle_;
};

TEST(SpecEngine, TheCostGateCountsTheProposersOwnTimeAndStopsAskingAnExpensiveOne) {
  // Steps cost 2 ms + 0.05 ms a token (so a 5-token drafted step is barely dearer than a plain
  // one) and every draft is accepted: drafts pay unless the proposer itself is slow. A draft
  // model whose forwards take 50 ms per call never pays; 0.05 ms (n-gram lookup) always does.
  const std::vector<int32_t> prompt = random_prompt(12, 7);
  constexpr int kTokens = 400, kProbeEvery = 16;
  SpecHarness base(nullptr, 0);
  const auto want = base.run({prompt}, kTokens, SamplingParams::greedy());
  int cheap_calls = 0;
  for (double propose_ms : {0.05, 50.0}) {
    SpecHarness h(nullptr, 4);
    auto oracle = std::make_shared<CountingOracle>(h.model);
    EngineConfig ec = spec_config(oracle, 4);
    ec.spec.cost_gate = true;
    ec.spec.probe_every = kProbeEvery;
    ec.step_ms_for_test = [](const StepPlan& p) { return 2.0 + 0.05 * double(p.n_tokens()); };
    ec.propose_ms_for_test = [propose_ms](size_t) { return propose_ms; };
    h.engine = std::make_unique<Engine>(h.model, *h.kv, letter_codec(), ec);
    const auto got = h.run({prompt}, kTokens, SamplingParams::greedy());
    EXPECT_EQ(got[0].tokens, want[0].tokens) << "propose_ms " << propose_ms;
    const SpecStats st = h.engine->stats().spec;
    const int64_t steps = h.engine->stats().sched.steps;
    if (propose_ms < 1) {
      EXPECT_EQ(st.steps_off_cost, 0) << "a cheap proposer whose drafts are all accepted stays on";
      EXPECT_EQ(int64_t(oracle->calls), st.steps) << "every call's drafts were used";
      cheap_calls = oracle->calls;
    } else {
      EXPECT_GT(st.steps_off_cost, 0) << "50 ms per call never pays for steps of ~2 ms";
      // 16 warm-up steps with drafts, the call that turned the gate off, then one probe every
      // probe_every steps: the proposer is not asked on the others.
      EXPECT_LE(oracle->calls, 16 + 1 + int(steps / kProbeEvery) + 1) << steps << " steps";
      EXPECT_GT(oracle->calls, 16 + 1) << "probes ask it again";
      EXPECT_LT(oracle->calls * 4, steps) << "asked on most steps (the cheap run: " << cheap_calls << " calls)";
    }
  }
}

// The oracle's draft with every token after the first made wrong: under greedy sampling position
// 0 is always accepted and position 1 always rejected.
class FirstRightOracle final : public Proposer {
 public:
  explicit FirstRightOracle(const MarkovModel& m) : oracle_(m) {}
  void propose(std::span<DraftRequest> batch) override {
    oracle_.propose(batch);
    for (DraftRequest& r : batch)
      for (size_t i = 1; i < r.draft.size(); ++i) r.draft[i] = (r.draft[i] + 1) % kVocab;
  }
  const char* name() const override { return "first-right oracle"; }

 private:
  OracleProposer oracle_;
};

TEST(SpecEngine, TheCostGateCapsDraftsAtTheLengthThatPaysMost) {
  // Steps cost 2 ms + 0.5 ms a token. Position 0 is always accepted and position 1 never: a draft
  // of 1 emits 2 tokens for 3 ms, a draft of 4 the same 2 tokens for 4.5 ms, no draft 1 token
  // for 2.5 ms. After the warm-up the gate cuts drafts to 1 token (every 16th capped step keeps
  // the whole draft, to keep measuring the later positions).
  const std::vector<int32_t> prompt = random_prompt(12, 7);
  constexpr int kTokens = 400;
  SpecHarness base(nullptr, 0);
  const auto want = base.run({prompt}, kTokens, SamplingParams::greedy());
  for (bool gate : {false, true}) {
    SpecHarness h(nullptr, 4);
    EngineConfig ec = spec_config(std::make_shared<FirstRightOracle>(h.model), 4);
    ec.spec.cost_gate = gate;
    ec.step_ms_for_test = [](const StepPlan& p) { return 2.0 + 0.5 * double(p.n_tokens()); };
    ec.propose_ms_for_test = [](size_t) { return 0.01; };
    h.engine = std::make_unique<Engine>(h.model, *h.kv, letter_codec(), ec);
    const auto got = h.run({prompt}, kTokens, SamplingParams::greedy());
    EXPECT_EQ(got[0].tokens, want[0].tokens) << "gate " << gate;
    const SpecStats st = h.engine->stats().spec;
    EXPECT_EQ(st.accepted, st.verifications) << "position 0 is always accepted, position 1 never";
    EXPECT_EQ(st.steps_off_cost, 0) << "a draft of 1 pays";
    const double per_verification = double(st.drafted) / double(st.verifications);
    if (gate)
      EXPECT_LT(per_verification, 1.6) << "capped at 1 after the warm-up (whole drafts: 16 warm-up steps, every 16th after)";
    else
      EXPECT_GT(per_verification, 3.5) << "without the gate every draft is 4 tokens (fewer only near max_tokens)";
  }
}

}  // namespace
}  // namespace tessera::spec_test

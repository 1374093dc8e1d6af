// The step cost model (fit on synthetic timings) and the scheduler's cost-limited prefill chunks,
// driven with synthetic step times from a known cost function (no model, no clock).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/sched/scheduler.h"
#include "core/sched/step_cost.h"

namespace tessera {
namespace {

// A CPU-like truth: attention over a long context costs several times a short step.
constexpr StepCostCoefficients kTruth{20.0, 0.8, 0.4, 4e-4};

double true_ms(const StepShape& s) {
  return kTruth.c0_ms + kTruth.token_ms * s.n_tokens + kTruth.logit_ms * s.n_logits + kTruth.pair_ms * s.n_pairs;
}

// A random step: some decodes at random contexts, sometimes a prefill chunk.
StepShape random_step(std::mt19937& rng) {
  StepShape s;
  const int decodes = std::uniform_int_distribution<int>(0, 16)(rng);
  for (int i = 0; i < decodes; ++i) s.add(std::uniform_int_distribution<int>(8, 2000)(rng), 1, true);
  if (decodes == 0 || rng() % 2) {
    const int32_t n = std::uniform_int_distribution<int>(1, 256)(rng);
    s.add(std::uniform_int_distribution<int>(0, 4000)(rng), n, rng() % 4 == 0);
  }
  return s;
}

void expect_near_rel(double got, double want, double tol, const char* what) {
  EXPECT_NEAR(got / want, 1.0, tol) << what << ": fitted " << got << ", true " << want;
}

TEST(StepCost, AttentionPairsCountEveryCausalQueryKeyPair) {
  EXPECT_EQ(attention_pairs(0, 1), 1.0);
  EXPECT_EQ(attention_pairs(10, 1), 11.0);                // a decode attends its 10 cached keys and itself
  EXPECT_EQ(attention_pairs(0, 4), 1.0 + 2 + 3 + 4);
  EXPECT_EQ(attention_pairs(100, 3), 101.0 + 102 + 103);
}

TEST(StepCost, FitConvergesOnNoisyTimingsFromAWrongPrior) {
  // The prior is off by 3-10x in different directions (as a nominal device speed would be).
  StepCostModel m({kTruth.c0_ms * 5, kTruth.token_ms / 3, kTruth.logit_ms * 4, kTruth.pair_ms / 10});
  std::mt19937 rng(1234);
  std::lognormal_distribution<double> noise(0.0, 0.05);  // ~5% jitter
  for (int i = 0; i < 600; ++i) {
    const StepShape s = random_step(rng);
    double ms = true_ms(s) * noise(rng);
    if (i % 50 == 49) ms *= 6;  // a step stalled by another process
    m.observe(s, ms);
  }
  const StepCostCoefficients c = m.coefficients();
  expect_near_rel(c.c0_ms, kTruth.c0_ms, 0.15, "c0");
  expect_near_rel(c.token_ms, kTruth.token_ms, 0.15, "token");
  expect_near_rel(c.logit_ms, kTruth.logit_ms, 0.3, "logit");  // the smallest term: least certain
  expect_near_rel(c.pair_ms, kTruth.pair_ms, 0.15, "pair");
  for (int i = 0; i < 50; ++i) {
    const StepShape s = random_step(rng);
    expect_near_rel(m.predict_ms(s), true_ms(s), 0.1, "prediction");
  }
  EXPECT_EQ(m.n_observed(), 600);
}

TEST(StepCost, TracksADeviceThatSlowsDown) {
  // Forgetting: after the machine gets 3x slower (other work arrives), the fit follows.
  StepCostModel m(kTruth);
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    const StepShape s = random_step(rng);
    m.observe(s, 3 * true_ms(s));
  }
  const StepShape probe = random_step(rng);
  expect_near_rel(m.predict_ms(probe), 3 * true_ms(probe), 0.1, "prediction after the slowdown");
}

TEST(StepCost, ALongDecodeOnlyPeriodKeepsWhatPrefillCosts) {
  // Decode-only steps excite one direction; the fit must neither forget what a prefill chunk
  // costs nor wind up so that one stalled step swings it.
  StepCostModel m({kTruth.c0_ms * 2, kTruth.token_ms / 2, kTruth.logit_ms * 2, kTruth.pair_ms * 2});
  std::mt19937 rng(11);
  std::lognormal_distribution<double> noise(0.0, 0.05);
  for (int i = 0; i < 300; ++i) {
    const StepShape s = random_step(rng);
    m.observe(s, true_ms(s) * noise(rng));
  }
  StepShape decodes;
  for (int i = 0; i < 8; ++i) decodes.add(300, 1, true);
  for (int i = 0; i < 1000; ++i) m.observe(decodes, true_ms(decodes) * noise(rng));
  m.observe(decodes, 8 * true_ms(decodes));  // stalled
  StepShape chunk = decodes;
  chunk.add(3000, 32, false);
  expect_near_rel(m.predict_ms(chunk), true_ms(chunk), 0.15, "a chunk after 1000 decode-only steps");
}

TEST(StepCost, CoefficientsStayNonNegativeAndIgnoreBadTimings) {
  // Timings that do not depend on the shape at all (pure noise) must not drive a term negative.
  StepCostModel m(kTruth);
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> u(5.0, 50.0);
  for (int i = 0; i < 300; ++i) m.observe(random_step(rng), u(rng));
  m.observe(random_step(rng), -1.0);
  m.observe(random_step(rng), std::nan(""));
  m.observe(random_step(rng), 0.0);
  EXPECT_EQ(m.n_observed(), 300);
  const StepCostCoefficients c = m.coefficients();
  EXPECT_GE(c.c0_ms, 0.0);
  EXPECT_GE(c.token_ms, 0.0);
  EXPECT_GE(c.logit_ms, 0.0);
  EXPECT_GE(c.pair_ms, 0.0);
  EXPECT_GT(c.c0_ms, 5.0) << "the constant term should carry the shape-independent time";
}

TEST(StepCost, MaxChunkIsTheLargestThatFits) {
  StepCostModel m(kTruth);
  StepShape base;
  for (int i = 0; i < 8; ++i) base.add(100, 1, true);
  const double limit = 2 * m.predict_ms(base);
  for (int32_t ctx : {0, 1000, 4000}) {
    const int32_t n = m.max_chunk(base, ctx, limit, 512);
    ASSERT_GT(n, 0) << "ctx " << ctx;
    ASSERT_LT(n, 512) << "ctx " << ctx;
    StepShape fit = base, over = base;
    fit.add(ctx, n, true);
    over.add(ctx, n + 1, true);
    EXPECT_LE(m.predict_ms(fit), limit);
    EXPECT_GT(m.predict_ms(over), limit);
  }
  EXPECT_EQ(m.max_chunk(base, 0, 1e9, 300), 300) << "the cap holds";
  EXPECT_EQ(m.max_chunk(base, 0, m.predict_ms(base), 300), 0) << "no room at all";
}

// A scheduler with |n_decodes| running single-token decodes and one long prompt, stepped with
// synthetic times from kTruth until the prompt is computed. Records each prefill chunk and its
// context.
struct PolicyRun {
  std::vector<int32_t> chunk, context;
  std::vector<double> predicted, limit;
  int32_t first_chunk_no_decodes = 0;
  int steps = 0, probes = 0;  // steps while the long prompt was pending, and those without it
};

// A Scheduler stepped with synthetic times from kTruth: prompts of random tokens, each step
// planned, timed, committed, and a random next token for every sampled row.
struct SyntheticScheduler {
  SyntheticScheduler(const SchedulerConfig& cfg, uint32_t seed) : sched(cfg, pool), rng(seed) {}
  std::unique_ptr<Sequence> make(RequestId id, int32_t len) {
    auto s = std::make_unique<Sequence>();
    s->id = id;
    s->arrival = uint64_t(id);
    for (int32_t i = 0; i < len; ++i) s->tokens.push_back(int32_t(rng() % 1000));
    s->n_prompt = len;
    return s;
  }
  std::vector<ScheduledSeq> step() {
    auto sc = sched.plan(&plan);
    StepShape shape;
    for (const auto& x : sc) shape.add(x.seq->n_computed, x.n_new, x.samples);
    sched.observe(true_ms(shape));
    sched.commit(sc);
    for (const auto& x : sc)
      if (x.samples) x.seq->tokens.push_back(int32_t(rng() % 1000));  // the decode's next token
    return sc;
  }
  BlockPool pool{4096};
  Scheduler sched;
  std::mt19937 rng;
  StepPlan plan;
};

PolicyRun run_policy(const SchedulerConfig& cfg, int n_decodes, int32_t prompt_len) {
  SyntheticScheduler sim(cfg, 5);
  Scheduler& sched = sim.sched;
  auto make = [&](RequestId id, int32_t len) { return sim.make(id, len); };
  auto step = [&] { return sim.step(); };
  PolicyRun r;
  // The decodes' prompts arrive alone (no decode running yet: full budget), then decode a while
  // so the fit has seen prefill-sized and decode-sized steps.
  for (int i = 0; i < n_decodes; ++i) {
    sched.add(make(i + 1, 64));
    auto sc = step();
    if (i == 0) r.first_chunk_no_decodes = sc.empty() ? 0 : sc[0].n_new;
  }
  for (int i = 0; i < 40; ++i) step();
  sched.add(make(1000, prompt_len));
  Sequence* longp = sched.find(1000);
  while (longp->n_computed < prompt_len) {
    const int32_t before = longp->n_computed;
    auto sc = step();
    ++r.steps;
    if (std::none_of(sc.begin(), sc.end(), [&](const ScheduledSeq& x) { return x.seq == longp; })) ++r.probes;
    for (const auto& x : sc)
      if (x.seq == longp) {
        r.chunk.push_back(x.n_new);
        r.context.push_back(before);
        r.predicted.push_back(sched.stats().step.last_predicted_ms);
        r.limit.push_back(sched.stats().step.last_limit_ms);
      }
  }
  return r;
}

TEST(StepCostPolicy, ChunksShrinkAsContextGrowsAndKeepStepsWithinTheFactor) {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 512;
  cfg.block_size = 16;
  cfg.itl_factor = 2.0;
  cfg.min_prefill_chunk = 4;
  cfg.cost_prior = {kTruth.c0_ms * 3, kTruth.token_ms / 3, kTruth.logit_ms, kTruth.pair_ms / 3};  // learnt
  const PolicyRun r = run_policy(cfg, 8, 4000);
  ASSERT_GT(r.chunk.size(), 10u);
  EXPECT_EQ(r.first_chunk_no_decodes, 64) << "a lone prompt takes its whole prompt (budget 512)";
  // Early chunks (context < 500) are larger than late ones (context > 3500).
  double early = 0, late = 0;
  int n_early = 0, n_late = 0;
  for (size_t i = 0; i < r.chunk.size(); ++i) {
    if (r.context[i] < 500) { early += r.chunk[i]; ++n_early; }
    if (r.context[i] > 3500) { late += r.chunk[i]; ++n_late; }
    EXPECT_LE(r.chunk[i], 512 - 8);
    EXPECT_GT(r.limit[i], 0.0) << "decodes were running";
    // Within the factor, except where the floor forces a chunk the limit would not allow.
    if (r.chunk[i] > cfg.min_prefill_chunk) {
      EXPECT_LE(r.predicted[i], r.limit[i] * 1.0001) << "chunk " << i;
    }
  }
  ASSERT_GT(n_early, 0);
  ASSERT_GT(n_late, 0);
  EXPECT_GT(early / n_early, 2.0 * late / n_late) << "chunks must shrink as the context grows";
  // Every 16th step is a decode-only probe that re-anchors the fit.
  EXPECT_NEAR(r.probes, r.steps / cfg.cost_probe_every, 2) << r.steps << " steps";
}

// The scheduler counts as waiting only the prompts this step could take: queued ones beyond the
// seats max_seqs leaves do not lift the limit (they would wait all the same, while the decodes
// and a running prompt's full-budget chunks would not).
TEST(StepCostPolicy, OnlyAdmissiblePromptsMakeTheQueueDeep) {
  auto deep_with = [](int32_t max_seqs, double* limit) {
    SchedulerConfig cfg;
    cfg.max_batch_tokens = 512;
    cfg.block_size = 16;
    cfg.itl_factor = 2.0;
    cfg.max_seqs = max_seqs;
    cfg.cost_prior = kTruth;
    cfg.cost_probe_every = 0;
    SyntheticScheduler sim(cfg, 11);
    Scheduler& sched = sim.sched;
    auto make = [&](RequestId id, int32_t len) { return sim.make(id, len); };
    auto step = [&] { sim.step(); };
    for (int i = 0; i < 3; ++i) {  // 3 decodes
      sched.add(make(i + 1, 32));
      step();
    }
    for (int i = 0; i < 10; ++i) step();
    sched.add(make(100, 3000));  // a long prompt beside them: W = 1 <= R = 3
    step();
    EXPECT_FALSE(sched.stats().step.last_deep_queue);
    for (int i = 0; i < 8; ++i) sched.add(make(200 + i, 32));  // 8 more queued
    step();
    *limit = sched.stats().step.last_limit_ms;
    return sched.stats().step.last_deep_queue;
  };
  double limit = -1;
  EXPECT_TRUE(deep_with(64, &limit)) << "8 admissible prompts + the long one beside 3 decodes";
  EXPECT_EQ(limit, 0.0);
  EXPECT_FALSE(deep_with(4, &limit)) << "no seat left: only the long prompt waits on this step";
  EXPECT_GT(limit, 0.0);
}

TEST(StepCostPolicy, AbsoluteStepLimitAndOffSwitch) {
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 512;
  cfg.block_size = 16;
  cfg.cost_prior = kTruth;
  cfg.itl_factor = 0;  // off: every chunk fills the budget (512 - 4 decodes)
  PolicyRun off = run_policy(cfg, 4, 1500);
  ASSERT_FALSE(off.chunk.empty());
  EXPECT_EQ(off.chunk[0], 512 - 4);
  EXPECT_EQ(off.limit[0], 0.0);
  cfg.max_step_ms = 60;  // absolute limit only
  PolicyRun capped = run_policy(cfg, 4, 1500);
  for (size_t i = 0; i < capped.chunk.size(); ++i) {
    EXPECT_EQ(capped.limit[i], 60.0);
    if (capped.chunk[i] > cfg.min_prefill_chunk) {
      EXPECT_LE(capped.predicted[i], 60.0 * 1.0001);
    }
  }
  EXPECT_LT(capped.chunk[0], 512 - 4);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// The limit protects the decodes' ITL while they are at least as many as the sequences waiting
// on prefill; a deeper queue lifts it (the step fills the budget), unless max_step_ms is set.
TEST(StepCostPolicy, AQueueDeeperThanTheDecodesLiftsTheLimit) {
  StepCostPolicyConfig cfg;
  cfg.itl_factor = 2.0;
  cfg.prior = kTruth;
  cfg.probe_every = 0;
  StepCostPolicy policy(cfg);
  StepShape decodes;
  for (int i = 0; i < 4; ++i) decodes.add(100 * (i + 1), 1, true);
  auto limit_for = [&](StepCostPolicy& p, int32_t decoding, int32_t awaiting) {
    p.begin_step(decodes, decoding, awaiting);
    p.end_step(decodes, 0);
    return p.stats().last_limit_ms;
  };
  const double plain = limit_for(policy, 4, 0);
  EXPECT_NEAR(plain, 2.0 * true_ms(decodes), 1e-9);
  EXPECT_FALSE(policy.stats().last_deep_queue);
  EXPECT_DOUBLE_EQ(limit_for(policy, 4, 3), plain);  // fewer waiting than decoding: the factor
  EXPECT_DOUBLE_EQ(limit_for(policy, 4, 4), plain);
  EXPECT_EQ(limit_for(policy, 4, 5), 0.0);  // 5 prompts waiting beside 4 decodes: no limit
  EXPECT_TRUE(policy.stats().last_deep_queue);
  EXPECT_EQ(policy.chunk(0, 1500), 1500);   // the chunk is what the budget leaves
  EXPECT_EQ(limit_for(policy, 1, 31), 0.0);
  EXPECT_DOUBLE_EQ(limit_for(policy, 4, 1), plain);  // and back once the queue drains
  EXPECT_LT(policy.chunk(0, 1500), 1500);
  // An explicit step-time cap still holds for a deep queue.
  StepCostPolicyConfig capped = cfg;
  capped.max_step_ms = 0.5 * plain;
  StepCostPolicy cap(capped);
  EXPECT_DOUBLE_EQ(limit_for(cap, 4, 0), 0.5 * plain);
  EXPECT_DOUBLE_EQ(limit_for(cap, 1, 31), 0.5 * plain);
  // Off stays off however many wait.
  StepCostPolicyConfig off = cfg;
  off.itl_factor = 0;
  StepCostPolicy none(off);
  none.begin_step(decodes, 4, 100);
  none.end_step(decodes, 0);
  EXPECT_EQ(none.stats().last_limit_ms, 0.0);
}

}  // namespace
}  // namespace tessera

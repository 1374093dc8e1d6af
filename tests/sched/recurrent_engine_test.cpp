// The engine on a hybrid model: one attention layer (paged KV) and one recurrent layer whose
// fixed-size state lives in the KV cache's RecurrentStatePool. The fake's next-token logits depend
// on the token before (read back from the KV cache, as spec_fake_model's MarkovModel does) AND on
// the recurrent state, which sums up every token so far and which the fake updates token by token
// in the state pool's tensors. So a state that is not restored on a prefix-cache hit, not rolled
// back after a rejected draft, not copied on a fork or lost in a preemption changes the output.
// Each test compares against the same prompts run alone on a fresh engine with every feature off.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "core/kv/kv_cache.h"
#include "core/reference/reference.h"
#include "core/sched/engine.h"
#include "tests/sched/spec_fake_model.h"

namespace tessera {
namespace {

using spec_test::kVocab;
using spec_test::MarkovModel;

constexpr int32_t kStateBuckets = 13;

// Layer 0: attention; layer 1: recurrent, with a state "h" [2] (a running hash of the tokens) and
// "conv" [3] (the last three tokens, as a short convolution's tail).
class HybridModel : public ModelRunner {
 public:
  HybridModel() : bias_(size_t(kStateBuckets * kVocab)) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (float& v : bias_) v = u(rng);
  }
  int32_t vocab_size() const override { return kVocab; }
  int32_t context_length() const override { return 4096; }
  Status forward(const StepPlan& p, KvCache& kv, std::vector<float>* logits) override {
    const int32_t bs = kv.config().block_size;
    RecurrentStatePool* states = kv.states();
    EXPECT_NE(states, nullptr);
    EXPECT_FALSE(kv.has_kv(1)) << "a recurrent layer keeps no K/V";
    EXPECT_EQ(int32_t(p.state_slots.size()), p.n_seqs());
    float* h = static_cast<float*>(states->find(1, "h")->host_data());
    float* conv = static_cast<float*>(states->find(1, "conv")->host_data());
    float* k = static_cast<float*>(kv.k(0).host_data());
    for (int32_t r = 0; r < p.n_tokens(); ++r) k[size_t(p.slot_mapping[size_t(r)]) * 2] = float(p.tokens[size_t(r)]);
    std::vector<bool> wants(size_t(p.n_tokens()), false);
    for (int32_t r : p.logit_rows) wants[size_t(r)] = true;
    std::map<int32_t, std::vector<float>> rows;
    for (int32_t s = 0; s < p.n_seqs(); ++s) {
      const int32_t slot = p.state_slots[size_t(s)];
      EXPECT_TRUE(states->is_live(slot)) << "sequence " << s << " has no live state slot";
      if (!states->is_live(slot)) continue;
      float* hs = h + size_t(slot) * 2;
      float* cs = conv + size_t(slot) * 3;
      for (int32_t r = p.query_start[size_t(s)]; r < p.query_start[size_t(s + 1)]; ++r) {
        const int32_t tok = p.tokens[size_t(r)], pos = p.positions[size_t(r)];
        // The recurrence, exact in f32 (small integers).
        hs[0] = std::fmod(hs[0] * 7.0f + float(tok) + 1.0f, 101.0f);
        hs[1] = std::fmod(hs[1] * 3.0f + hs[0], 97.0f);
        cs[0] = cs[1];
        cs[1] = cs[2];
        cs[2] = float(tok);
        if (!wants[size_t(r)]) continue;
        int32_t before = 0;
        if (pos > 0) before = int32_t(k[size_t(p.block_tables[size_t(s * p.max_blocks + (pos - 1) / bs)] * bs + (pos - 1) % bs) * 2]);
        const float* m = markov_.row(pos, before, tok);
        const int32_t bucket = (int32_t(hs[0]) + int32_t(hs[1]) * 5 + int32_t(cs[0]) * 3) % kStateBuckets;
        std::vector<float>& row = rows[r];
        for (int32_t v = 0; v < kVocab; ++v) row.push_back(m[v] + bias_[size_t(bucket * kVocab + v)]);
      }
    }
    logits->clear();
    for (int32_t r : p.logit_rows) logits->insert(logits->end(), rows[r].begin(), rows[r].end());
    tokens_computed += p.n_tokens();
    return OkStatus();
  }
  const MarkovModel& markov() const { return markov_; }
  int64_t tokens_computed = 0;

 private:
  MarkovModel markov_;
  std::vector<float> bias_;  // [kStateBuckets, kVocab]
};

struct Options {
  int n_blocks = 256;
  int n_slots = 8;
  int n_checkpoints = 16;
  bool caching = true;
  int checkpoint_every = 8;
  int align = 1;  // SchedulerConfig::state_align (the fake model's state needs none)
  int budget = 16;
  int swap_blocks = 0;
  std::shared_ptr<Proposer> proposer;
  int k = 0;
};

struct Harness {
  explicit Harness(const Options& o) {
    KvCacheConfig c;
    c.n_layers = 2; c.n_kv_heads = 1; c.head_dim = 2; c.block_size = 4; c.n_blocks = o.n_blocks; c.dtype = DType::kF32;
    c.recurrent.n_slots = o.n_slots;
    c.recurrent.n_checkpoints = o.n_checkpoints;
    c.recurrent.layers = {{1, {{"h", DType::kF32, {2}}, {"conv", DType::kF32, {3}}}}};
    auto made = KvCache::create(dev, c);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    kv = std::move(made).value();
    EngineConfig ec;
    ec.scheduler.max_batch_tokens = o.budget;
    ec.scheduler.prefix_caching = o.caching;
    ec.scheduler.state_checkpoint_every = o.checkpoint_every;
    ec.scheduler.state_align = o.align;
    ec.scheduler.swap = o.swap_blocks > 0;
    ec.scheduler.swap_blocks = o.swap_blocks;
    ec.scheduler.itl_factor = 0;  // plans independent of timing
    if (o.proposer) {
      ec.spec.proposer = o.proposer;
      ec.spec.k = o.k;
      ec.spec.max_batch = 1 << 20;
      ec.spec.cost_gate = false;
    }
    engine = std::make_unique<Engine>(model, *kv, TextCodec{}, ec);
  }
  RequestId submit(const std::vector<int32_t>& prompt, int max_tokens, SamplingParams sp = SamplingParams::greedy(), int n = 1) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling = sp;
    r.max_tokens = max_tokens;
    r.n = n;
    r.on_token = [this](const TokenEvent& ev) {
      if (ev.token >= 0) out[{ev.id, ev.index}].push_back(ev.token);
      if (ev.finish != FinishReason::kNone) finish[{ev.id, ev.index}] = ev.finish;
      if (ev.metrics) metrics[{ev.id, ev.index}] = *ev.metrics;
    };
    auto id = engine->submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return id.ok() ? *id : -1;
  }
  std::vector<int32_t> run(const std::vector<int32_t>& prompt, int max_tokens, SamplingParams sp = SamplingParams::greedy()) {
    const RequestId id = submit(prompt, max_tokens, sp);
    EXPECT_TRUE(engine->run_until_idle().ok());
    return out[{id, 0}];
  }
  const std::vector<int32_t>& of(RequestId id, int choice = 0) { return out[{id, choice}]; }
  FinishReason finish_of(RequestId id) { return finish[{id, 0}]; }
  ref::ReferenceDevice dev;
  HybridModel model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Engine> engine;
  std::map<std::pair<RequestId, int>, std::vector<int32_t>> out;
  std::map<std::pair<RequestId, int>, FinishReason> finish;
  std::map<std::pair<RequestId, int>, RequestMetrics> metrics;
};

// The prompt run alone on a fresh engine: no prefix cache, no drafts, room for everything.
std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int max_tokens, SamplingParams sp = SamplingParams::greedy()) {
  Options o;
  o.caching = false;
  o.n_checkpoints = 0;
  Harness h(o);
  return h.run(prompt, max_tokens, sp);
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(RecurrentEngine, TheStateShapesTheOutput) {
  // Two prompts that end alike and differ only in their first token: the attention side sees the
  // same last two tokens, so only the recurrent state tells them apart.
  std::vector<int32_t> a = spec_test::random_prompt(21, 3), b = a;
  b[0] = (b[0] + 1) % kVocab;
  EXPECT_NE(alone(a, 24), alone(b, 24));
  Harness h({});
  EXPECT_EQ(h.kv->n_kv_layers(), 1);
  EXPECT_EQ(h.engine->stats().state.pool.bytes_per_slot, 5 * 4);
}

TEST(RecurrentEngine, TheBranchPointOfASharedPrefixIsCheckpointedForTheNextPrompt) {
  // Prompts sharing a 38-token system prompt, with no periodic checkpoints: the first leaves a
  // checkpoint at its own prompt end only (past the shared part), so the second restores nothing;
  // its KV matched up to the branch point (36), where its state is checkpointed, so the third
  // restores 36 tokens and computes only its own.
  const std::vector<int32_t> sys = spec_test::random_prompt(38, 21);
  const std::vector<int32_t> q1 = concat(sys, spec_test::random_prompt(9, 22)), q2 = concat(sys, spec_test::random_prompt(7, 23)),
                             q3 = concat(sys, spec_test::random_prompt(10, 24));
  Options o;
  o.checkpoint_every = 0;
  Harness h(o);
  EXPECT_EQ(h.run(q1, 8), alone(q1, 8));
  EXPECT_EQ(h.run(q2, 8), alone(q2, 8));
  EXPECT_EQ(h.engine->stats().state.restored_tokens, 0) << "no checkpoint within the shared part yet";
  const int64_t computed_before = h.model.tokens_computed;
  EXPECT_EQ(h.run(q3, 8), alone(q3, 8));
  EXPECT_EQ(h.engine->stats().state.restored_tokens, 36);
  EXPECT_EQ(h.model.tokens_computed - computed_before, int64_t(q3.size()) - 36 + 7);
}

TEST(RecurrentEngine, APrefixCacheHitRestoresTheCheckpointedStateAndGivesTheTokensOfARunWithoutIt) {
  const std::vector<int32_t> sys = spec_test::random_prompt(37, 11);
  const std::vector<int32_t> q1 = concat(sys, spec_test::random_prompt(6, 12)), q2 = concat(sys, spec_test::random_prompt(9, 13));
  Harness h({});
  const auto first = h.run(sys, 20);
  EXPECT_EQ(first, alone(sys, 20));
  EXPECT_EQ(h.engine->stats().state.restored_tokens, 0);
  // The identical prompt: its state at the prompt's last block boundary (36) is checkpointed.
  const int64_t computed_before = h.model.tokens_computed;
  EXPECT_EQ(h.run(sys, 20), first);
  EXPECT_EQ(h.engine->stats().state.restored_tokens, 36);
  EXPECT_EQ(h.model.tokens_computed - computed_before, 1 + 19) << "only the last prompt token and the decodes";
  // Longer prompts sharing it: hits at the boundary, then their own tokens.
  EXPECT_EQ(h.run(q1, 20), alone(q1, 20));
  EXPECT_EQ(h.run(q2, 20), alone(q2, 20));
  const EngineStats st = h.engine->stats();
  EXPECT_EQ(st.state.restored_tokens, 3 * 36);
  EXPECT_GE(st.state.pool.hits, 3);
  EXPECT_EQ(st.state.pool.slots_used, 0) << "finished sequences free their slots";
  EXPECT_GT(st.sched.cached_tokens, 0);

  // Without checkpoint rows the KV blocks are there but the state is not: no hit, same tokens.
  Options none;
  none.n_checkpoints = 0;
  Harness n(none);
  EXPECT_EQ(n.run(sys, 20), first);
  EXPECT_EQ(n.run(q1, 20), alone(q1, 20));
  EXPECT_EQ(n.engine->stats().sched.cached_tokens, 0) << "a KV match without the state's checkpoint is not used";
}

TEST(RecurrentEngine, PrefillChunksEndAtCheckpointBoundariesAndEveryChunkSplitGivesTheSameTokens) {
  const std::vector<int32_t> p = spec_test::random_prompt(45, 21);
  const auto want = alone(p, 12);
  for (int align : {1, 8})
    for (int budget : {3, 5, 16, 64})
      for (int every : {0, 4, 8, 12}) {
        Options o;
        o.budget = budget;
        o.checkpoint_every = every;
        o.align = align;
        Harness h(o);
        const std::string where = "budget " + std::to_string(budget) + " every " + std::to_string(every) + " align " + std::to_string(align);
        EXPECT_EQ(h.run(p, 12), want) << where;
        // A second run finds the checkpoint at the prompt's last boundary: the last block
        // boundary, 44, or with 8-token alignment the last multiple of 8, 40.
        EXPECT_EQ(h.run(p, 12), want) << where;
        EXPECT_EQ(h.engine->stats().state.restored_tokens, align == 1 ? 44 : 40) << where;
      }
}

// Drafts from the Markov part alone (blind to the state): some are accepted, some rejected.
TEST(RecurrentEngine, RejectedDraftsRollTheStateBackAndGiveTheTokensOfARunWithoutDrafts) {
  for (int k : {1, 3, 5}) {
    Options o;
    static const MarkovModel table;  // the fake's own Markov table (seed 7), without the state
    o.proposer = std::make_shared<spec_test::OracleProposer>(table);
    o.k = k;
    Harness h(o);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<RequestId> ids;
    for (int i = 0; i < 4; ++i) {
      prompts.push_back(spec_test::random_prompt(9 + 5 * i, uint32_t(40 + i)));
      ids.push_back(h.submit(prompts.back(), 40));
    }
    ASSERT_TRUE(h.engine->run_until_idle().ok());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(h.of(ids[i], 0), alone(prompts[i], 40)) << "k " << k << " prompt " << i;
    const EngineStats st = h.engine->stats();
    EXPECT_GT(st.spec.accepted, 0) << "k " << k;
    EXPECT_LT(st.spec.accepted, st.spec.drafted) << "k " << k;
    EXPECT_GT(st.state.rollbacks, 0) << "k " << k;
    EXPECT_EQ(st.state.pool.checkpoints_pinned, 0) << "no snapshot outlives its step";
  }
}

TEST(RecurrentEngine, ForkedChoicesCopyTheStateAndEachGivesTheTokensOfItsOwnRun) {
  // Sampled choices: choice i samples with seed + i, exactly as a lone request with that seed.
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 100;
  const std::vector<int32_t> p = spec_test::random_prompt(23, 31);
  for (int n_slots : {8, 2}) {  // room for every choice; too few slots (some choices wait)
    Options o;
    o.n_slots = n_slots;
    Harness h(o);
    const RequestId id = h.submit(p, 30, sp, 4);
    ASSERT_TRUE(h.engine->run_until_idle().ok());
    std::set<std::vector<int32_t>> distinct;
    for (int i = 0; i < 4; ++i) {
      SamplingParams own = sp;
      own.seed = sp.seed + uint64_t(i);
      EXPECT_EQ(h.of(id, i), alone(p, 30, own)) << "choice " << i << " slots " << n_slots;
      distinct.insert(h.of(id, i));
    }
    EXPECT_GT(distinct.size(), 1u) << "the choices differ, so each one's state matters";
    const EngineStats st = h.engine->stats();
    if (n_slots == 8) EXPECT_EQ(st.state.forks, 3);
    else EXPECT_GT(st.state.fork_waits, 0) << "with 2 slots some choices wait and recompute";
    EXPECT_EQ(st.state.pool.slots_used, 0);
  }
}

TEST(RecurrentEngine, PreemptionRecomputesOrSwapsTheStateAndGivesTheTokensOfARunWithout) {
  for (int swap_blocks : {0, 64}) {
    for (bool caching : {false, true}) {
      Options o;
      o.n_blocks = 14;  // 56 KV slots for 6 requests of up to ~50 tokens: preemptions
      o.swap_blocks = swap_blocks;
      o.caching = caching;
      Harness h(o);
      std::vector<std::vector<int32_t>> prompts;
      std::vector<RequestId> ids;
      for (int i = 0; i < 6; ++i) {
        prompts.push_back(spec_test::random_prompt(7 + 3 * i, uint32_t(60 + i % 3)));
        ids.push_back(h.submit(prompts.back(), 25));
      }
      ASSERT_TRUE(h.engine->run_until_idle().ok());
      const std::string where = "swap " + std::to_string(swap_blocks) + " caching " + std::to_string(caching);
      for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(h.of(ids[i], 0), alone(prompts[i], 25)) << where << " prompt " << i;
      const EngineStats st = h.engine->stats();
      EXPECT_GT(st.sched.preemptions, 0) << where;
      if (swap_blocks > 0) {
        EXPECT_GT(st.state.swapped_out, 0) << where;
        EXPECT_EQ(st.state.swapped_in, st.state.swapped_out) << where;
        EXPECT_EQ(st.state.swapped_out, st.kv.swap_outs) << "the state swaps with its blocks " << where;
      } else {
        EXPECT_EQ(st.state.swapped_out, 0) << where;
      }
      EXPECT_EQ(st.state.pool.slots_used, 0) << where;
      EXPECT_EQ(h.kv->pool().n_free(), 14) << where;
    }
  }
}

TEST(RecurrentEngine, WithMoreRequestsThanStateSlotsTheRestWaitAndNoneIsDropped) {
  Options o;
  o.n_slots = 2;
  Harness h(o);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestId> ids;
  int max_running = 0;
  for (int i = 0; i < 7; ++i) {
    prompts.push_back(spec_test::random_prompt(5 + 2 * i, uint32_t(80 + i)));
    ids.push_back(h.submit(prompts.back(), 15));
  }
  while (!h.engine->idle()) {
    ASSERT_TRUE(h.engine->step().ok());
    max_running = std::max(max_running, h.engine->stats().running);
  }
  EXPECT_EQ(max_running, 2);
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(h.of(ids[i], 0), alone(prompts[i], 15)) << "prompt " << i;
    EXPECT_EQ(h.finish_of(ids[i]), FinishReason::kLength);
  }
}

TEST(RecurrentEngine, ADraftModelWithRecurrentLayersIsRefused) {
  ref::ReferenceDevice dev;
  KvCacheConfig c;
  c.n_layers = 2; c.n_kv_heads = 1; c.head_dim = 2; c.block_size = 4; c.n_blocks = 8; c.dtype = DType::kF32;
  c.recurrent.n_slots = 2;
  c.recurrent.layers = {{1, {{"h", DType::kF32, {2}}}}};
  auto kv = KvCache::create(dev, c);
  ASSERT_TRUE(kv.ok());
  auto p = DraftModelProposer::create(std::make_shared<MarkovModel>(), std::move(kv).value(), kVocab);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("recurrent"), std::string::npos) << p.status().to_string();
}

TEST(RecurrentEngine, ACacheRefusesABadRecurrentLayer) {
  ref::ReferenceDevice dev;
  KvCacheConfig c;
  c.n_layers = 2; c.n_kv_heads = 1; c.head_dim = 2; c.block_size = 4; c.n_blocks = 8; c.dtype = DType::kF32;
  c.recurrent.n_slots = 2;
  c.recurrent.layers = {{2, {{"h", DType::kF32, {2}}}}};
  auto kv = KvCache::create(dev, c);
  ASSERT_FALSE(kv.ok());
  EXPECT_NE(kv.status().message().find("recurrent layer 2 outside [0, 2)"), std::string::npos) << kv.status().to_string();
}

}  // namespace
}  // namespace tessera

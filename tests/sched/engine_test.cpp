// Engine + scheduler tests with a fake model whose next token is a function of the current token
// and its position. The fake also checks every StepPlan for consistency (slots agree with block
// tables, positions are contiguous, no slot is written twice by live sequences).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <set>

#include "core/kv/kv_cache.h"
#include "core/reference/reference.h"
#include "core/sched/engine.h"
#include "core/sched/engine_thread.h"

namespace tessera {
namespace {

constexpr int32_t kVocab = 97;
// The fake model's next token: a function of the sum of every token in the context (read back
// from the KV cache through the block table, so wrong blocks, missed copies or a bad prefix hit
// change the output), the position and the current token.
int32_t next_of(int64_t context_sum, int32_t pos, int32_t tok) { return int32_t((context_sum * 31 + pos * 7 + tok * 3 + 3) % kVocab); }

class FakeModel : public ModelRunner {
 public:
  int32_t vocab_size() const override { return kVocab; }
  int32_t context_length() const override { return 4096; }
  Status forward(const StepPlan& p, KvCache& kv, std::vector<float>* logits) override {
    const int bs = kv.config().block_size;
    ++steps;
    tokens_computed += p.n_tokens();
    max_tokens_in_step = std::max(max_tokens_in_step, p.n_tokens());
    EXPECT_EQ(int(p.query_start.size()), p.n_seqs() + 1);
    // K cache [n_blocks, bs, 1, 2] f32: element 0 of each slot holds the token.
    float* k = static_cast<float*>(kv.k(0).host_data());
    for (int32_t r = 0; r < p.n_tokens(); ++r) k[size_t(p.slot_mapping[size_t(r)]) * 2] = float(p.tokens[size_t(r)]);
    std::vector<int64_t> sums(size_t(p.n_tokens()), -1);
    std::vector<bool> wants_logits(size_t(p.n_tokens()), false);
    for (int32_t r : p.logit_rows) wants_logits[size_t(r)] = true;
    for (int32_t s = 0; s < p.n_seqs(); ++s) {
      const int32_t a = p.query_start[size_t(s)], b = p.query_start[size_t(s + 1)];
      for (int32_t r = a; r < b; ++r) {
        const int32_t pos = p.positions[size_t(r)];
        EXPECT_EQ(pos, p.seq_lens[size_t(s)] - (b - r)) << "positions must end at seq_len - 1";
        const int32_t block = p.block_tables[size_t(s * p.max_blocks + pos / bs)];
        EXPECT_EQ(p.slot_mapping[size_t(r)], block * bs + pos % bs);
        EXPECT_GT(kv.pool().refcount(block), 0) << "a slot in a free block";
        EXPECT_EQ(kv.pool().refcount(block), 1) << "a write into a shared block (copy-on-write missed)";
        if (!wants_logits[size_t(r)]) continue;
        int64_t sum = 0;  // causal: positions 0..pos
        for (int32_t q = 0; q <= pos; ++q)
          sum += int64_t(k[size_t(p.block_tables[size_t(s * p.max_blocks + q / bs)] * bs + q % bs) * 2]);
        sums[size_t(r)] = sum;
      }
    }
    // Two likely candidates (so sampling with temperature varies), every other token unlikely.
    logits->assign(p.logit_rows.size() * kVocab, -20.0f);
    for (size_t i = 0; i < p.logit_rows.size(); ++i) {
      const size_t r = size_t(p.logit_rows[i]);
      const int32_t want = next_of(sums[r], p.positions[r], p.tokens[r]);
      (*logits)[i * kVocab + size_t(want)] = 10.0f;
      (*logits)[i * kVocab + size_t((want + 1) % kVocab)] = 9.0f;
    }
    // Embeddings (after the logits rows): [sum of the sequence's tokens, its length, its new
    // tokens this step], which must be the whole sequence.
    for (int32_t s : p.pool_seqs) {
      const int32_t a = p.query_start[size_t(s)], b = p.query_start[size_t(s + 1)];
      EXPECT_EQ(p.seq_lens[size_t(s)], b - a) << "an embedding must be computed whole in one step";
      float sum = 0;
      for (int32_t r = a; r < b; ++r) sum += float(p.tokens[size_t(r)]);
      logits->insert(logits->end(), {sum, float(p.seq_lens[size_t(s)]), float(b - a)});
    }
    return OkStatus();
  }
  int32_t embedding_dim() const override { return embeds ? 3 : 0; }
  std::string why_no_embeddings() const override { return "the fake has no pooling"; }
  bool embeds = false;
  int steps = 0;
  int64_t tokens_computed = 0;
  int32_t max_tokens_in_step = 0;
};

// Greedy continuation of |prompt| under the fake model.
std::vector<int32_t> expected(const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> seq = prompt, out;
  int64_t sum = 0;
  for (int32_t t : prompt) sum += t;
  for (int i = 0; i < n; ++i) {
    const int32_t t = next_of(sum, int32_t(seq.size()) - 1, seq.back());
    out.push_back(t);
    seq.push_back(t);
    sum += t;
  }
  return out;
}

// Whether each token of |out| is one of the fake model's two candidates given what preceded it.
bool plausible(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
  std::vector<int32_t> seq = prompt;
  int64_t sum = 0;
  for (int32_t t : prompt) sum += t;
  for (int32_t t : out) {
    const int32_t want = next_of(sum, int32_t(seq.size()) - 1, seq.back());
    if (t != want && t != (want + 1) % kVocab) return false;
    seq.push_back(t);
    sum += t;
  }
  return true;
}

struct Harness {
  explicit Harness(int n_blocks, int32_t budget = 64, bool prefix_caching = true, int block_size = 4, int swap_blocks = 0,
                   std::function<double(const StepPlan&)> step_ms = {}) {
    KvCacheConfig c;
    c.n_layers = 1; c.n_kv_heads = 1; c.head_dim = 2; c.block_size = block_size; c.n_blocks = n_blocks; c.dtype = DType::kF32;
    kv = std::move(KvCache::create(dev, c)).value();
    EngineConfig ec;
    ec.scheduler.max_batch_tokens = budget;
    ec.scheduler.prefix_caching = prefix_caching;
    ec.scheduler.swap = swap_blocks > 0;
    ec.scheduler.swap_blocks = swap_blocks;
    ec.step_ms_for_test = std::move(step_ms);
    engine = std::make_unique<Engine>(model, *kv, TextCodec{}, ec);
  }
  RequestId submit(const std::vector<int32_t>& prompt, int max_tokens, int priority = 0, int n = 1,
                   SamplingParams sp = SamplingParams::greedy()) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling = sp;
    r.max_tokens = max_tokens;
    r.priority = priority;
    r.n = n;
    r.on_token = [this](const TokenEvent& ev) {
      if (ev.token >= 0) choices[{ev.id, ev.index}].push_back(ev.token);
      if (ev.token >= 0 && ev.index == 0) out[ev.id].push_back(ev.token);
      if (ev.finish != FinishReason::kNone && ev.index == 0) finish[ev.id] = ev.finish;
      if (ev.metrics && ev.index == 0) metrics[ev.id] = *ev.metrics;
      order.push_back(ev.id);
    };
    auto id = engine->submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return *id;
  }
  ref::ReferenceDevice dev;
  FakeModel model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Engine> engine;
  std::map<RequestId, std::vector<int32_t>> out;
  std::map<RequestId, FinishReason> finish;
  std::map<std::pair<RequestId, int>, std::vector<int32_t>> choices;
  std::map<RequestId, RequestMetrics> metrics;
  std::vector<RequestId> order;  // of events
};

std::vector<int32_t> prompt_of(int len, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back((seed * 13 + i * 5 + (i * i) % 7) % kVocab);
  return p;
}

TEST(Engine, ManyRequestsBatchedGiveTheirOwnOutputs) {
  Harness h(256);
  std::map<RequestId, std::vector<int32_t>> want;
  for (int i = 0; i < 16; ++i) {
    const auto p = prompt_of(3 + i * 5, i);
    want[h.submit(p, 10 + i)] = expected(p, 10 + i);
  }
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  for (auto& [id, w] : want) {
    EXPECT_EQ(h.out[id], w) << "request " << id;
    EXPECT_EQ(h.finish[id], FinishReason::kLength);
  }
  EXPECT_EQ(h.kv->pool().n_free(), 256) << "every block returns to the pool";
}

TEST(Engine, PreemptsUnderKvPressureAndStillCompletesEveryRequestExactly) {
  Harness h(12);  // 48 slots for 6 requests of ~20 tokens each
  std::map<RequestId, std::vector<int32_t>> want;
  for (int i = 0; i < 6; ++i) {
    const auto p = prompt_of(6 + i, i);
    want[h.submit(p, 14)] = expected(p, 14);
  }
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  for (auto& [id, w] : want) EXPECT_EQ(h.out[id], w) << "request " << id;
  EXPECT_GT(h.engine->scheduler().stats().preemptions, 0);
  EXPECT_EQ(h.kv->pool().n_free(), 12);
}

TEST(Engine, ChunkedPrefillRespectsTheTokenBudget) {
  Harness h(64, /*budget=*/8);
  const auto p = prompt_of(45, 1);
  const RequestId id = h.submit(p, 5);
  const auto p2 = prompt_of(4, 2);
  const RequestId id2 = h.submit(p2, 12);
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  EXPECT_LE(h.model.max_tokens_in_step, 8);
  EXPECT_EQ(h.out[id], expected(p, 5));
  EXPECT_EQ(h.out[id2], expected(p2, 12));
}

TEST(Engine, EmbeddingsRunWholeBesideGenerationAndFreeTheirBlocks) {
  Harness h(64, /*budget=*/24);
  h.model.embeds = true;
  std::map<RequestId, std::vector<float>> emb;
  auto embed = [&](const std::vector<int32_t>& prompt) {
    GenerationRequest r;
    r.embed = true;
    r.prompt = prompt;
    r.on_token = [&emb](const TokenEvent& ev) {
      EXPECT_EQ(ev.token, -1) << "an embedding request samples nothing";
      if (ev.finish == FinishReason::kStop) emb[ev.id] = ev.embedding;
    };
    auto id = h.engine->submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return *id;
  };
  const auto g = prompt_of(40, 1);  // chunked: 40 tokens over a 24-token budget
  const RequestId gen = h.submit(g, 6);
  ASSERT_TRUE(h.engine->step().ok());  // its first chunk fills the prefix cache
  std::map<RequestId, std::vector<int32_t>> want;
  for (int i = 0; i < 5; ++i) want[embed(prompt_of(5 + 2 * i, 10 + i))] = prompt_of(5 + 2 * i, 10 + i);
  const std::vector<int32_t> head(g.begin(), g.begin() + 20);
  want[embed(head)] = head;  // cached blocks of the generation: no prefix hit, computed whole
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  EXPECT_EQ(h.out[gen], expected(g, 6)) << "generation beside embeddings is unchanged";
  EXPECT_LE(h.model.max_tokens_in_step, 24);
  for (const auto& [id, p] : want) {
    ASSERT_EQ(emb[id].size(), 3u) << "request " << id;
    float sum = 0;
    for (int32_t t : p) sum += float(t);
    EXPECT_EQ(emb[id][0], sum);
    EXPECT_EQ(emb[id][1], float(p.size()));
  }
  EXPECT_EQ(h.kv->pool().n_free(), 64) << "embedding requests keep no blocks";
}

TEST(Engine, EmbeddingRequestsAreValidated) {
  Harness h(64, /*budget=*/16);
  GenerationRequest r;
  r.embed = true;
  r.prompt = prompt_of(5, 1);
  auto s = h.engine->submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("the fake has no pooling"), std::string::npos) << s.status().to_string();
  h.model.embeds = true;
  r.prompt = prompt_of(17, 1);  // over the step budget: an embedding never splits
  s = h.engine->submit(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("max_batch_tokens"), std::string::npos) << s.status().to_string();
  r.prompt = prompt_of(16, 1);
  EXPECT_TRUE(h.engine->submit(r).ok());
  ASSERT_TRUE(h.engine->run_until_idle().ok());
}

TEST(Engine, CancelFreesBlocks) {
  Harness h(32);
  const RequestId a = h.submit(prompt_of(10, 3), 100);
  ASSERT_TRUE(h.engine->step().ok());
  EXPECT_LT(h.kv->pool().n_free(), 32);
  h.engine->cancel(a);
  EXPECT_EQ(h.finish[a], FinishReason::kCancelled);
  EXPECT_EQ(h.kv->pool().n_free(), 32);
  EXPECT_TRUE(h.engine->idle());
}

TEST(Engine, RejectsBadRequestsWithClearErrors) {
  Harness h(4);
  GenerationRequest r;
  EXPECT_EQ(h.engine->submit(r).status().code(), StatusCode::kInvalidArgument);  // empty prompt
  r.prompt = prompt_of(20, 1);  // 16 slots in the whole cache
  EXPECT_EQ(h.engine->submit(r).status().code(), StatusCode::kResourceExhausted);
  r.prompt = {1, 2, kVocab};
  auto s = h.engine->submit(r);
  EXPECT_NE(s.status().message().find("outside the vocabulary"), std::string::npos) << s.status().message();
}

TEST(Engine, StopStringsEndGenerationAndAreNotEmitted) {
  Harness h(64);
  // Each token is shown as a letter; stop at the text of the 3rd generated token.
  const auto p = prompt_of(5, 4);
  const auto want = expected(p, 10);
  GenerationRequest r;
  r.prompt = p;
  r.sampling = SamplingParams::greedy();
  r.max_tokens = 10;
  auto piece = [](int32_t t) { return std::string(1, char('A' + t % 26)) + std::string(1, char('a' + t % 26)); };
  r.stop = {piece(want[2])};
  std::string text;
  FinishReason fin = FinishReason::kNone;
  r.on_token = [&](const TokenEvent& ev) { text += ev.text; if (ev.finish != FinishReason::kNone) fin = ev.finish; };
  TextCodec codec;
  codec.piece = piece;
  codec.is_eog = [](int32_t) { return false; };
  Engine e(h.model, *h.kv, codec);
  ASSERT_TRUE(e.submit(std::move(r)).ok());
  ASSERT_TRUE(e.run_until_idle().ok());
  // The stop string may also occur earlier by coincidence; the text must end right before its first match.
  std::string full;
  for (int32_t t : want) full += piece(t);
  EXPECT_EQ(text, full.substr(0, full.find(piece(want[2]))));
  EXPECT_EQ(fin, FinishReason::kStop);
}

TEST(PrefixCache, ASecondRequestSharingAPrefixComputesOnlyItsSuffix) {
  Harness h(256);
  const auto shared = prompt_of(100, 7);  // 25 full blocks of 4
  auto pa = shared;
  pa.insert(pa.end(), {1, 2, 3});
  auto pb = shared;
  pb.insert(pb.end(), {4, 5, 6, 7, 8});
  const RequestId a = h.submit(pa, 6);
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  const int64_t before = h.model.tokens_computed;
  EXPECT_EQ(before, int64_t(pa.size()) + 5) << "the first request computes its prompt and 5 decodes";
  const RequestId b = h.submit(pb, 6);
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  // 100 shared tokens come from the cache: only the 5 new prompt tokens and 5 decodes run.
  EXPECT_EQ(h.model.tokens_computed - before, 5 + 5);
  EXPECT_EQ(h.metrics[b].cached_tokens, 100);
  EXPECT_EQ(h.metrics[a].cached_tokens, 0);
  EXPECT_EQ(h.out[a], expected(pa, 6));
  EXPECT_EQ(h.out[b], expected(pb, 6)) << "cached blocks must give the same output as computing them";
  const EngineStats st = h.engine->stats();
  EXPECT_GT(st.kv.prefix_hits, 0);
  EXPECT_NEAR(st.prefix_hit_rate(), 100.0 / double(pa.size() + pb.size()), 1e-9);
  EXPECT_EQ(st.kv_usage.blocks_used, 0) << "finished requests own no blocks";
  EXPECT_GT(st.kv_usage.blocks_cached, 0) << "their full blocks stay cached";
}

TEST(PrefixCache, AnIdenticalPromptStillComputesItsLastToken) {
  Harness h(64);
  const auto p = prompt_of(32, 3);  // exactly 8 full blocks
  const RequestId a = h.submit(p, 3);
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  const int64_t before = h.model.tokens_computed;
  const RequestId b = h.submit(p, 3);
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  // 7 blocks are cached; the 8th holds the last prompt token, whose logits are needed.
  EXPECT_EQ(h.metrics[b].cached_tokens, 28);
  EXPECT_EQ(h.model.tokens_computed - before, 4 + 2);
  EXPECT_EQ(h.out[a], h.out[b]);
}

TEST(PrefixCache, EvictsLeastRecentlyUsedBlocksWhenThePoolIsFull) {
  Harness h(16);  // 64 slots
  const auto p1 = prompt_of(40, 1), p2 = prompt_of(40, 2);
  h.submit(p1, 2);
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  const RequestId b = h.submit(p2, 2);  // needs 11 blocks: evicts most of p1's
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  EXPECT_EQ(h.out[b], expected(p2, 2));
  EXPECT_GT(h.kv->pool().stats().evictions, 0);
  const RequestId c = h.submit(p1, 2);  // whatever survived may be reused; output is exact
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  EXPECT_EQ(h.out[c], expected(p1, 2));
  EXPECT_EQ(h.kv->pool().n_free(), 16);
}

TEST(Fork, ParallelChoicesShareThePromptAndCopyOnWrite) {
  Harness h(128);
  const auto p = prompt_of(30, 5);  // 7 full blocks + a partial one shared by the forks
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 1234;
  const RequestId id = h.submit(p, 20, 0, /*n=*/4, sp);
  ASSERT_TRUE(h.engine->step().ok());  // the prompt, forked after it
  EXPECT_EQ(h.engine->stats().running, 4);
  EXPECT_LE(h.kv->pool().n_used(), 8) << "the choices share the prompt's blocks";
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  std::set<std::vector<int32_t>> distinct;
  for (int c = 0; c < 4; ++c) {
    const auto& out = h.choices[{id, c}];
    EXPECT_EQ(out.size(), 20u) << "choice " << c;
    EXPECT_TRUE(plausible(p, out)) << "choice " << c << " read K/V that is not its own history";
    distinct.insert(out);
  }
  EXPECT_GT(distinct.size(), 1u) << "seeded choices sample differently";
  EXPECT_GE(h.engine->scheduler().kv().stats().cow_copies, 3);
  EXPECT_EQ(h.kv->pool().n_free(), 128);
}

TEST(Kv, SixtyFourConcurrentSequencesWasteUnderFourPercent) {
  Harness h(64 * 40, /*budget=*/1 << 16, /*prefix_caching=*/true, /*block_size=*/16);
  std::mt19937 rng(42);
  std::map<RequestId, std::vector<int32_t>> want;
  for (int i = 0; i < 64; ++i) {
    const auto p = prompt_of(int(150 + rng() % 400), i + 11);
    const int n = int(20 + rng() % 60);
    want[h.submit(p, n)] = expected(p, n);
  }
  double worst = 0;
  int steps = 0;
  while (!h.engine->idle()) {
    ASSERT_TRUE(h.engine->step().ok());
    const EngineStats st = h.engine->stats();
    if (st.running == 64) {
      worst = std::max(worst, double(st.kv_usage.slots_waste) / double(st.kv_usage.slots_allocated));
      ++steps;
    }
  }
  EXPECT_GT(steps, 10);
  EXPECT_LT(worst, 0.04) << "waste is only each sequence's partial last block";
  EXPECT_GT(worst, 0.0);
  for (auto& [id, w] : want) EXPECT_EQ(h.out[id], w) << "request " << id;
}

TEST(Engine, TinyPoolPreemptionCompletesEveryRequestExactlyAsAlone) {
  for (bool caching : {false, true}) {
    Harness h(10, 16, caching);  // 40 slots, many requests of up to ~30 tokens
    std::map<RequestId, std::vector<int32_t>> want;
    std::mt19937 rng(7);
    for (int i = 0; i < 12; ++i) {
      const auto p = prompt_of(int(4 + rng() % 14), i % 5);  // repeated prompts hit the cache
      const int n = int(5 + rng() % 12);
      want[h.submit(p, n, int(rng() % 2))] = expected(p, n);
    }
    ASSERT_TRUE(h.engine->run_until_idle().ok());
    for (auto& [id, w] : want) {
      EXPECT_EQ(h.out[id], w) << "request " << id << " caching " << caching;
      EXPECT_EQ(h.finish[id], FinishReason::kLength);
    }
    EXPECT_GT(h.engine->stats().sched.preemptions, 0);
    EXPECT_EQ(h.kv->pool().n_free(), 10);
  }
}

// Swap preemption: the K/V of a preempted sequence go to host memory and come back, so it
// resumes without recomputing; the fake model reads every context token back through the block
// tables, so a block restored wrong (or into the wrong place) changes the output.
TEST(Engine, SwapPreemptionCompletesEveryRequestExactlyAsAloneAndCountsTheSwaps) {
  for (bool caching : {false, true}) {
    for (int swap_blocks : {64, 6}) {  // room for every victim; too little for some (those recompute)
      Harness h(10, 16, caching, 4, swap_blocks);
      std::map<RequestId, std::vector<int32_t>> want;
      std::mt19937 rng(11);
      for (int i = 0; i < 12; ++i) {
        const auto p = prompt_of(int(4 + rng() % 14), i % 5);
        const int n = int(5 + rng() % 12);
        want[h.submit(p, n, int(rng() % 2))] = expected(p, n);
      }
      ASSERT_TRUE(h.engine->run_until_idle().ok());
      const std::string where = "caching " + std::to_string(caching) + " swap blocks " + std::to_string(swap_blocks);
      for (auto& [id, w] : want) {
        EXPECT_EQ(h.out[id], w) << "request " << id << " " << where;
        EXPECT_EQ(h.finish[id], FinishReason::kLength) << where;
      }
      const EngineStats st = h.engine->stats();
      EXPECT_GT(st.kv.swap_outs, 0) << where;
      EXPECT_EQ(st.kv.swap_ins, st.kv.swap_outs) << "every swapped sequence came back " << where;
      EXPECT_EQ(st.kv.blocks_swapped_in, st.kv.blocks_swapped_out) << where;
      EXPECT_LE(st.kv.swap_outs, st.sched.preemptions) << where;
      if (swap_blocks == 64) {
        EXPECT_EQ(st.kv.swap_outs, st.sched.preemptions) << "with room, every preemption swaps " << where;
      }
      EXPECT_EQ(h.kv->pool().n_free(), 10) << where;
      EXPECT_EQ(h.kv->swap_slots(), swap_blocks);
    }
  }
}

TEST(Engine, ASequenceOutgrowingTheWholePoolEndsWithLengthAndOthersContinue) {
  Harness h(4, 64);  // 16 slots in all
  const auto p = prompt_of(10, 1), q = prompt_of(3, 2);
  const RequestId big = h.submit(p, 40);
  const RequestId small = h.submit(q, 4);
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  EXPECT_EQ(h.finish[big], FinishReason::kLength);
  ASSERT_GE(h.out[big].size(), 1u);
  EXPECT_LT(h.out[big].size(), 40u);
  const auto want_big = expected(p, int(h.out[big].size()));
  EXPECT_EQ(h.out[big], want_big) << "what it generated before the pool ran out is exact";
  EXPECT_EQ(h.out[small], expected(q, 4));
  EXPECT_EQ(h.kv->pool().n_free(), 4);
}

TEST(Engine, HigherPriorityIsServedFirst) {
  Harness h(256, 8);
  const RequestId low = h.submit(prompt_of(8, 1), 4, 0);
  const RequestId high = h.submit(prompt_of(8, 2), 4, 5);
  ASSERT_TRUE(h.engine->run_until_idle().ok());
  ASSERT_FALSE(h.order.empty());
  EXPECT_EQ(h.order.front(), high);
  EXPECT_EQ(h.out[low].size(), 4u);
}

TEST(EngineThread, ManyThreadsSubmitAndCancelConcurrently) {
  Harness h(512, 64);
  EngineThread et(*h.engine);
  std::mutex mu;
  std::condition_variable cv;
  std::map<RequestId, std::vector<int32_t>> got;
  std::map<RequestId, FinishReason> fin;
  std::map<RequestId, std::vector<int32_t>> want;
  auto submit = [&](const std::vector<int32_t>& p, int n) {
    GenerationRequest r;
    r.prompt = p;
    r.sampling = SamplingParams::greedy();
    r.max_tokens = n;
    r.on_token = [&](const TokenEvent& ev) {
      std::lock_guard<std::mutex> lock(mu);
      if (ev.token >= 0) got[ev.id].push_back(ev.token);
      if (ev.finish != FinishReason::kNone) {
        fin[ev.id] = ev.finish;
        cv.notify_all();
      }
    };
    auto id = et.submit(std::move(r));
    EXPECT_TRUE(id.ok());
    return *id;
  };
  std::vector<std::thread> threads;
  std::vector<RequestId> to_cancel;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 12; ++i) {
        const auto p = prompt_of(5 + i, t * 100 + i);
        const int n = (i % 4 == 3) ? 4000 : 8 + i;  // every 4th would run long: cancelled
        const RequestId id = submit(p, n);
        std::lock_guard<std::mutex> lock(mu);
        if (n == 4000) to_cancel.push_back(id);
        else want[id] = expected(p, n);
      }
    });
  for (auto& t : threads) t.join();
  for (RequestId id : to_cancel) et.cancel(id);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return fin.size() == 48; }));
  }
  for (auto& [id, w] : want) {
    EXPECT_EQ(got[id], w) << "request " << id;
    EXPECT_EQ(fin[id], FinishReason::kLength);
  }
  for (RequestId id : to_cancel) EXPECT_EQ(fin[id], FinishReason::kCancelled);
  et.shutdown(/*drain=*/true);
  EXPECT_EQ(et.stats().kv_usage.blocks_used, 0);
  EXPECT_EQ(et.submit(GenerationRequest{}).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest late;
  late.prompt = {1, 2};
  EXPECT_EQ(et.submit(std::move(late)).status().code(), StatusCode::kUnavailable);
}

TEST(EngineThread, ShutdownWithoutDrainCancelsRunningRequests) {
  Harness h(64, 16);
  std::atomic<int> cancelled{0};
  {
    EngineThread et(*h.engine);
    for (int i = 0; i < 3; ++i) {
      GenerationRequest r;
      r.prompt = prompt_of(6, i);
      r.sampling = SamplingParams::greedy();
      r.max_tokens = 4000;
      r.on_token = [&](const TokenEvent& ev) { if (ev.finish == FinishReason::kCancelled) ++cancelled; };
      ASSERT_TRUE(et.submit(std::move(r)).ok());
    }
  }  // the destructor cancels and joins
  EXPECT_EQ(cancelled.load(), 3);
  EXPECT_EQ(h.kv->pool().n_free(), 64);
}

TEST(EngineThread, StatsShowAFinishedRequestOnceTheVersionAfterItsFinishIsPublished) {
  Harness h(64, 16);
  EngineThread et(*h.engine);
  for (int i = 0; i < 20; ++i) {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t version = 0;
    GenerationRequest r;
    r.prompt = prompt_of(9, i);
    r.sampling = SamplingParams::greedy();
    r.max_tokens = 5;
    r.on_token = [&](const TokenEvent& ev) {
      if (ev.finish == FinishReason::kNone) return;
      std::lock_guard<std::mutex> lock(mu);
      version = et.stats_version() + 1;
      cv.notify_all();
    };
    ASSERT_TRUE(et.submit(std::move(r)).ok());
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return version > 0; });
    }
    et.wait_stats_version(version, std::chrono::seconds(10));
    ASSERT_GE(et.stats_version(), version);
    const EngineStats st = et.stats();
    EXPECT_EQ(st.kv_usage.blocks_used, 0) << "request " << i;
    EXPECT_EQ(st.running, 0) << "request " << i;
    EXPECT_EQ(st.generated_tokens, 5 * (i + 1)) << "request " << i;
  }
}

// Recompute preemption: a step that had to preempt admits nothing, so a sequence is not let back
// into the blocks it just gave up only to be preempted again (the thrash of issue 20).
TEST(Engine, RecomputePreemptionAdmitsNothingInAPreemptingStepAndStaysBounded) {
  // 96 slots for 12 requests of 20 prompt + 40 generated tokens. The step cost model sees a
  // fixed cost per step (1 ms + 0.05 ms per token), not the clock: the preemption count depends
  // on the fit, and a loaded machine (or TSan) must not change it.
  Harness h(24, 64, true, 4, 0, [](const StepPlan& p) { return 1.0 + 0.05 * double(p.n_tokens()); });
  std::map<RequestId, std::vector<int32_t>> want;
  for (int i = 0; i < 12; ++i) {
    const auto p = prompt_of(20, 100 + i);
    want[h.submit(p, 40)] = expected(p, 40);
  }
  int64_t preemptions = 0, admitted = 0;
  int preempting_steps = 0;
  while (!h.engine->idle()) {
    ASSERT_TRUE(h.engine->step().ok());
    const SchedulerStats& st = h.engine->scheduler().stats();
    if (st.preemptions > preemptions) {
      ++preempting_steps;
      EXPECT_EQ(st.admitted_tokens, admitted) << "a step that preempted also admitted";
    }
    preemptions = st.preemptions;
    admitted = st.admitted_tokens;
  }
  for (auto& [id, w] : want) EXPECT_EQ(h.out[id], w) << "request " << id;
  EXPECT_GT(preempting_steps, 0);
  const SchedulerStats& st = h.engine->scheduler().stats();
  // Each request's tokens are admitted once, plus a re-prefill per preemption at most.
  EXPECT_LE(st.preemptions, 24) << "bounded: about two per request";
  EXPECT_EQ(h.kv->pool().n_free(), 24);
}

}  // namespace
}  // namespace tessera

// Engine + scheduler tests with a fake model whose next token is a function of the current token
// and its position. The fake also checks every StepPlan for consistency (slots agree with block
// tables, positions are contiguous, no slot is written twice by live sequences).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/kv/kv_cache.h"
#include "core/reference/reference.h"
#include "core/sched/engine.h"

namespace tessera {
namespace {

constexpr int32_t kVocab = 97;
int32_t next_of(int32_t tok, int32_t pos) { return (tok * 31 + pos * 7 + 3) % kVocab; }

class FakeModel : public ModelRunner {
 public:
  int32_t vocab_size() const override { return kVocab; }
  int32_t context_length() const override { return 4096; }
  Status forward(const StepPlan& p, KvCache& kv, std::vector<float>* logits) override {
    const int bs = kv.config().block_size;
    ++steps;
    max_tokens_in_step = std::max(max_tokens_in_step, p.n_tokens());
    EXPECT_EQ(int(p.query_start.size()), p.n_seqs() + 1);
    for (int32_t s = 0; s < p.n_seqs(); ++s) {
      const int32_t a = p.query_start[size_t(s)], b = p.query_start[size_t(s + 1)];
      for (int32_t r = a; r < b; ++r) {
        const int32_t pos = p.positions[size_t(r)];
        EXPECT_EQ(pos, p.seq_lens[size_t(s)] - (b - r)) << "positions must end at seq_len - 1";
        const int32_t block = p.block_tables[size_t(s * p.max_blocks + pos / bs)];
        EXPECT_EQ(p.slot_mapping[size_t(r)], block * bs + pos % bs);
        EXPECT_GT(kv.pool().refcount(block), 0) << "a slot in a free block";
      }
    }
    logits->assign(p.logit_rows.size() * kVocab, 0.0f);
    for (size_t i = 0; i < p.logit_rows.size(); ++i) {
      const int32_t r = p.logit_rows[i];
      (*logits)[i * kVocab + size_t(next_of(p.tokens[size_t(r)], p.positions[size_t(r)]))] = 1.0f;
    }
    return OkStatus();
  }
  int steps = 0;
  int32_t max_tokens_in_step = 0;
};

std::vector<int32_t> expected(const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  int32_t tok = prompt.back(), pos = int32_t(prompt.size()) - 1;
  for (int i = 0; i < n; ++i) {
    tok = next_of(tok, pos++);
    out.push_back(tok);
  }
  return out;
}

struct Harness {
  explicit Harness(int n_blocks, int32_t budget = 64) {
    KvCacheConfig c;
    c.n_layers = 1; c.n_kv_heads = 1; c.head_dim = 2; c.block_size = 4; c.n_blocks = n_blocks; c.dtype = DType::kF32;
    kv = std::move(KvCache::create(dev, c)).value();
    EngineConfig ec;
    ec.scheduler.max_batch_tokens = budget;
    engine = std::make_unique<Engine>(model, *kv, TextCodec{}, ec);
  }
  RequestId submit(const std::vector<int32_t>& prompt, int max_tokens, int priority = 0) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling = SamplingParams::greedy();
    r.max_tokens = max_tokens;
    r.priority = priority;
    r.on_token = [this](const TokenEvent& ev) {
      if (ev.token >= 0) out[ev.id].push_back(ev.token);
      if (ev.finish != FinishReason::kNone) finish[ev.id] = ev.finish;
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
};

std::vector<int32_t> prompt_of(int len, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back((seed * 13 + i * 5) % kVocab);
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

}  // namespace
}  // namespace tessera

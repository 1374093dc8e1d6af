// The engine's grammar hook with a scripted Grammar (no grammar library): the mask decides what is
// sampled against the model's preference, every choice of n > 1 gets its own fork, a dead end
// finishes the request with kGrammarDeadEnd (never a hang), and mask time reaches the stats.
#include <gtest/gtest.h>

#include <map>

#include "core/kv/kv_cache.h"
#include "core/reference/reference.h"
#include "core/sched/engine.h"

namespace tessera {
namespace {

constexpr int32_t kVocab = 40;

// Always prefers token 7 strongly, then token 8.
class PreferSeven : public ModelRunner {
 public:
  int32_t vocab_size() const override { return kVocab; }
  int32_t context_length() const override { return 256; }
  Status forward(const StepPlan& p, KvCache&, std::vector<float>* logits) override {
    logits->assign(p.logit_rows.size() * kVocab, 0.0f);
    for (size_t i = 0; i < p.logit_rows.size(); ++i) {
      (*logits)[i * kVocab + 7] = 20.0f;
      (*logits)[i * kVocab + 8] = 10.0f;
    }
    return OkStatus();
  }
};

// Allows exactly |script| in order (token i of the script at step i), then nothing: a dead end.
class ScriptGrammar : public Grammar {
 public:
  explicit ScriptGrammar(std::vector<int32_t> script, int* forks = nullptr) : script_(std::move(script)), forks_(forks) {}
  int32_t fill_mask(uint32_t* mask) override {
    std::fill(mask, mask + mask_words(kVocab), 0u);
    if (pos_ >= script_.size()) return 0;
    mask[script_[pos_] >> 5] |= 1u << (script_[pos_] & 31);
    return 1;
  }
  bool accept(int32_t t) override {
    if (pos_ >= script_.size() || t != script_[pos_]) return false;
    ++pos_;
    return true;
  }
  void rollback(int32_t n) override { pos_ -= size_t(n); }
  std::unique_ptr<Grammar> fork() const override {
    if (forks_) ++*forks_;
    auto g = std::make_unique<ScriptGrammar>(script_, forks_);
    g->pos_ = pos_;
    return g;
  }
  bool terminated() const override { return false; }
  int32_t vocab_size() const override { return kVocab; }

 private:
  std::vector<int32_t> script_;
  size_t pos_ = 0;
  int* forks_;
};

struct Rig {
  Rig() {
    KvCacheConfig c;
    c.n_layers = 1; c.n_kv_heads = 1; c.head_dim = 2; c.block_size = 4; c.n_blocks = 64; c.dtype = DType::kF32;
    kv = std::move(KvCache::create(dev, c)).value();
    engine = std::make_unique<Engine>(model, *kv, TextCodec{});
  }
  RequestId submit(std::shared_ptr<const Grammar> g, int max_tokens, int n = 1, SamplingParams sp = SamplingParams::greedy()) {
    GenerationRequest r;
    r.prompt = {1, 2, 3};
    r.sampling = sp;
    r.max_tokens = max_tokens;
    r.n = n;
    r.grammar = std::move(g);
    r.on_token = [this](const TokenEvent& ev) {
      if (ev.token >= 0) out[{ev.id, ev.index}].push_back(ev.token);
      if (ev.finish != FinishReason::kNone) finish[{ev.id, ev.index}] = ev.finish;
    };
    auto id = engine->submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return *id;
  }
  ref::ReferenceDevice dev;
  PreferSeven model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Engine> engine;
  std::map<std::pair<RequestId, int>, std::vector<int32_t>> out;
  std::map<std::pair<RequestId, int>, FinishReason> finish;
};

TEST(EngineGrammar, MaskOverridesTheModelAndADeadEndFinishes) {
  for (float temperature : {0.0f, 1.0f}) {
    Rig run;
    SamplingParams sp = SamplingParams::greedy();
    sp.temperature = temperature;
    sp.seed = 5;
    const RequestId id = run.submit(std::make_shared<ScriptGrammar>(std::vector<int32_t>{3, 30, 8}), 50, 1, sp);
    ASSERT_TRUE(run.engine->run_until_idle().ok());
    EXPECT_EQ(run.out[std::make_pair(id, 0)], (std::vector<int32_t>{3, 30, 8})) << "temperature " << temperature;
    EXPECT_EQ(run.finish[std::make_pair(id, 0)], FinishReason::kGrammarDeadEnd);
    const GrammarStats gs = run.engine->stats().grammar;
    EXPECT_EQ(gs.masks, 4);  // three tokens and the dead end
    EXPECT_EQ(gs.dead_ends, 1);
    EXPECT_GT(gs.mask_ms_p99, 0.0);
  }
  EXPECT_STREQ(finish_reason_name(FinishReason::kGrammarDeadEnd), "grammar_dead_end");
}

TEST(EngineGrammar, EachChoiceWorksOnItsOwnFork) {
  Rig run;
  int forks = 0;
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.seed = 9;
  const RequestId id = run.submit(std::make_shared<ScriptGrammar>(std::vector<int32_t>{5, 6}, &forks), 2, 3, sp);
  ASSERT_TRUE(run.engine->run_until_idle().ok());
  EXPECT_EQ(forks, 3);  // one per choice: the submitted grammar itself is never advanced
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(run.out[std::make_pair(id, k)], (std::vector<int32_t>{5, 6})) << "choice " << k;
    EXPECT_EQ(run.finish[std::make_pair(id, k)], FinishReason::kLength) << "choice " << k;
  }
}

TEST(EngineGrammar, AGrammarForAnotherVocabularyIsRefused) {
  class Wide : public ScriptGrammar {
   public:
    Wide() : ScriptGrammar({1}) {}
    int32_t vocab_size() const override { return kVocab + 1; }
  };
  Rig run;
  GenerationRequest r;
  r.prompt = {1};
  r.grammar = std::make_shared<Wide>();
  const Status s = run.engine->validate(r);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("grammar covers 41 tokens"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera

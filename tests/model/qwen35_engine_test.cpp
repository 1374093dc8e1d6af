// Qwen3.5 (qwen35: Gated DeltaNet layers beside gated attention) through the engine on the CPU,
// with the recurrent state in the KV cache's state pool: a prefix-cache hit (the state restored
// from its checkpoint), a fork (n > 1, the state copied), speculative decoding (rejected drafts
// roll the state back) and preemption each give exactly the greedy tokens of a plain run. The
// model is the tiny random Qwen3.5 that tests/model/qwen35/make_qwen35.py writes as llama.cpp's
// converter would (its logits are checked against a float64 numpy Qwen3.5 by compare_qwen35.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <filesystem>
#include <random>

#include "core/registry.h"
#include "core/sched/engine.h"
#include "core/sched/proposer.h"
#include "models/model.h"
#include "models/scoring.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

std::string make_model() {
  static std::string path;
  if (!path.empty()) return path;
  const char* py = std::getenv("TESSERA_PYTHON");
  const char* data = std::getenv("TESSERA_TEST_DATA");
  const std::string dir = (std::filesystem::temp_directory_path() / "tessera_qwen35_engine_test").string();
  const std::string script = std::string(data ? data : "tests/data") + "/../model/qwen35/make_qwen35.py";
  const std::string cmd = std::string(py ? py : "python3") + " " + script + " --out " + dir + " --no-vision > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  path = dir + "/tiny-qwen35-nomtp-f32.gguf";
  return path;
}

std::vector<int32_t> prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(rng() % 250));
  return p;
}

struct Runner {
  explicit Runner(Model& m, EngineConfig ec = {}, int64_t kv_tokens = 2048) : model(m) {
    auto made = m.create_kv_cache(kv_tokens, DType::kF32);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    kv = std::move(made).value();
    ec.scheduler.itl_factor = 0;  // plans independent of timing
    engine = std::make_unique<Engine>(m, *kv, m.codec(), ec);
  }
  RequestId submit(const std::vector<int32_t>& p, int max_tokens, int n = 1) {
    GenerationRequest r;
    r.prompt = p;
    r.sampling = SamplingParams::greedy();
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.n = n;
    r.on_token = [this](const TokenEvent& ev) {
      if (ev.token >= 0) out[{ev.id, ev.index}].push_back(ev.token);
      if (ev.metrics) cached[ev.id] = ev.metrics->cached_tokens;
    };
    auto id = engine->submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return id.ok() ? *id : -1;
  }
  std::vector<int32_t> run(const std::vector<int32_t>& p, int max_tokens) {
    const RequestId id = submit(p, max_tokens);
    EXPECT_TRUE(engine->run_until_idle().ok());
    return out[{id, 0}];
  }
  const std::vector<int32_t>& of(RequestId id, int choice = 0) { return out[{id, choice}]; }
  Model& model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Engine> engine;
  std::map<std::pair<RequestId, int>, std::vector<int32_t>> out;
  std::map<RequestId, int32_t> cached;
};

class Qwen35Engine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions lo;
    lo.max_seqs = 8;
    auto m = Model::load(make_model(), Registry::global().find("cpu").value(), lo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  std::vector<int32_t> alone(const std::vector<int32_t>& p, int max_tokens) {
    Runner r(*model_);
    return r.run(p, max_tokens);
  }
  static Model* model_;
};
Model* Qwen35Engine::model_ = nullptr;

TEST_F(Qwen35Engine, GreedyTokensFollowTheLogitsOfTheWholeSequence) {
  // Each generated token is the argmax of the prompt-plus-output logits computed in one pass.
  const auto p = prompt(37, 1);
  const auto gen = alone(p, 20);
  ASSERT_EQ(gen.size(), 20u);
  std::vector<int32_t> all = p;
  all.insert(all.end(), gen.begin(), gen.end());
  std::vector<float> logits;
  ASSERT_TRUE(eval_logits(*model_, all, 512, &logits, DType::kF32, int64_t(p.size()) - 1).ok());
  const size_t V = size_t(model_->vocab_size());
  for (size_t i = 0; i < gen.size(); ++i) {
    const float* row = logits.data() + i * V;
    EXPECT_EQ(int32_t(std::max_element(row, row + V) - row), gen[i]) << "token " << i;
  }
}

TEST_F(Qwen35Engine, APrefixCacheHitRestoresTheStateAndGivesTheSameTokens) {
  const auto sys = prompt(70, 2);
  auto longer = sys;
  for (int32_t t : prompt(9, 3)) longer.push_back(t);
  const auto want = alone(sys, 16), want_longer = alone(longer, 16);
  Runner r(*model_);
  EXPECT_EQ(r.run(sys, 16), want);
  const RequestId again = r.submit(sys, 16);
  ASSERT_TRUE(r.engine->run_until_idle().ok());
  EXPECT_EQ(r.of(again), want);
  EXPECT_EQ(r.cached[again], 64) << "the prompt's last block boundary (69 / 16 * 16) comes from the cache";
  EXPECT_EQ(r.run(longer, 16), want_longer);
  const EngineStats st = r.engine->stats();
  EXPECT_TRUE(st.has_state);
  EXPECT_GE(st.state.pool.hits, 2);
  EXPECT_EQ(st.state.restored_tokens, 2 * 64);
}

TEST_F(Qwen35Engine, ForkedChoicesCopyTheState) {
  const auto p = prompt(21, 4);
  const auto want = alone(p, 12);
  Runner r(*model_);
  const RequestId id = r.submit(p, 12, 3);
  ASSERT_TRUE(r.engine->run_until_idle().ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.of(id, i), want) << "choice " << i;
  EXPECT_EQ(r.engine->stats().state.forks, 2);
}

// Drafts the known greedy continuation, wrong at its second token every third call: some drafts
// are accepted whole, some only in part (the state is rolled back and the accepted part computed
// again).
class ScriptedProposer final : public Proposer {
 public:
  ScriptedProposer(size_t prompt_len, std::vector<int32_t> want, int32_t vocab)
      : prompt_len_(prompt_len), want_(std::move(want)), vocab_(vocab) {}
  void propose(std::span<DraftRequest> batch) override {
    for (DraftRequest& r : batch) {
      r.draft.clear();
      const size_t next = r.tokens.size() - prompt_len_;  // the index in want_ of the token after the pending one
      for (size_t i = next; i < want_.size() && int32_t(r.draft.size()) < r.k; ++i) r.draft.push_back(want_[i]);
      if (++calls_ % 3 == 0 && r.draft.size() > 1) r.draft[1] = (r.draft[1] + 1) % vocab_;
    }
  }
  const char* name() const override { return "scripted"; }

 private:
  size_t prompt_len_;
  std::vector<int32_t> want_;
  int32_t vocab_;
  int64_t calls_ = 0;
};

TEST_F(Qwen35Engine, RejectedDraftsRollTheStateBackAndGiveTheSameTokens) {
  const auto p = prompt(40, 5);
  const auto want = alone(p, 30);
  for (int k : {1, 3}) {
    EngineConfig ec;
    ec.spec.proposer = std::make_shared<ScriptedProposer>(p.size(), want, model_->vocab_size());
    ec.spec.k = k;
    ec.spec.cost_gate = false;
    ec.spec.max_batch = 64;
    Runner r(*model_, ec);
    EXPECT_EQ(r.run(p, 30), want) << "k " << k;
    const EngineStats st = r.engine->stats();
    EXPECT_GT(st.spec.accepted, 0) << "k " << k;
    if (k > 1) {
      EXPECT_LT(st.spec.accepted, st.spec.drafted);
      EXPECT_GT(st.state.rollbacks, 0) << "a rejected draft rolls the state back";
    }
    EXPECT_EQ(st.state.pool.checkpoints_pinned, 0) << "no snapshot outlives its step";
  }
}

TEST_F(Qwen35Engine, PreemptionUnderAFullKvPoolGivesTheSameTokens) {
  std::vector<std::vector<int32_t>> ps;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 4; ++i) {
    ps.push_back(prompt(30 + 5 * i, uint32_t(10 + i)));
    want.push_back(alone(ps.back(), 20));
  }
  Runner r(*model_, {}, 128);  // 8 blocks of 16 for 4 sequences of up to 65 tokens
  std::vector<RequestId> ids;
  for (const auto& p : ps) ids.push_back(r.submit(p, 20));
  ASSERT_TRUE(r.engine->run_until_idle().ok());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(r.of(ids[i]), want[i]) << "request " << i;
  EXPECT_GT(r.engine->stats().sched.preemptions, 0);
}

}  // namespace
}  // namespace tessera

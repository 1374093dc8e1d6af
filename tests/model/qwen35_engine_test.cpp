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
#include "tests/model/engine_runner.h"
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

using testing_engine::prompt;
using testing_engine::Runner;
using testing_engine::ScriptedProposer;

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

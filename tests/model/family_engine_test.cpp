// The families with sliding-window layers through the engine on the CPU, with the window layers'
// KV in a pool of its own that gives back the blocks a window no longer covers: Gemma 4 (window 8
// beside global layers of wider heads, KV sharing; the dense E2B shape and the 26B-A4B MoE shape)
// and gpt-oss (window 16 beside full layers, attention sinks, MoE). For each: greedy tokens are
// the argmax of the whole sequence's logits, and a prefix-cache hit, forked choices, speculative
// decoding with rejected drafts and preemption under a full pool each give exactly the tokens of
// a plain run. The models are the tiny random ones tests/model/{gemma4,gpt_oss}/make_*.py write
// as llama.cpp's converter would (their logits are checked against float64 numpy forward passes
// by compare_gemma4.py and compare_gpt_oss.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "core/registry.h"
#include "models/model.h"
#include "models/scoring.h"
#include "tests/model/engine_runner.h"

namespace tessera {
namespace {

using testing_engine::prompt;
using testing_engine::Runner;
using testing_engine::ScriptedProposer;

struct Family {
  const char* name;    // the test's suffix
  const char* script;  // under tests/model/
  const char* args;    // after --out DIR
  const char* file;    // the GGUF it writes
  int window;
};

const Family kFamilies[] = {
    {"gemma4_e2b", "gemma4/make_gemma4.py", "--no-hf", "tiny-gemma4-f32.gguf", 8},
    {"gemma4_26b_moe", "gemma4/make_gemma4.py", "--no-hf --variant 26b", "tiny-gemma4-26b-f32.gguf", 8},
    {"gpt_oss", "gpt_oss/make_gpt_oss.py", "", "tiny-gpt-oss-f32.gguf", 16},
};

std::string make_model(const Family& f) {
  const char* py = std::getenv("TESSERA_PYTHON");
  const char* data = std::getenv("TESSERA_TEST_DATA");
  const std::string dir =
      (std::filesystem::temp_directory_path() / (std::string("tessera_family_engine_") + f.name)).string();
  const std::string script = std::string(data ? data : "tests/data") + "/../model/" + f.script;
  const std::string cmd =
      std::string(py ? py : "python3") + " " + script + " --out " + dir + " " + f.args + " > /dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return dir + "/" + f.file;
}

class FamilyEngine : public ::testing::TestWithParam<Family> {
 protected:
  void SetUp() override {
    auto& slot = models_[GetParam().name];
    if (!slot) {
      LoadOptions lo;
      lo.max_seqs = 8;
      auto m = Model::load(make_model(GetParam()), Registry::global().find("cpu").value(), lo);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      slot = std::move(m).value();
    }
    model_ = slot.get();
  }
  static void TearDownTestSuite() { models_.clear(); }
  std::vector<int32_t> alone(const std::vector<int32_t>& p, int max_tokens) {
    Runner r(*model_);
    return r.run(p, max_tokens);
  }
  Model* model_ = nullptr;
  static std::map<std::string, std::unique_ptr<Model>> models_;
};
std::map<std::string, std::unique_ptr<Model>> FamilyEngine::models_;

TEST_P(FamilyEngine, GreedyTokensFollowTheLogitsOfTheWholeSequence) {
  const auto p = prompt(37, 1);  // longer than every window
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

TEST_P(FamilyEngine, APrefixCacheHitGivesTheSameTokens) {
  const auto sys = prompt(70, 2);
  auto longer = sys;
  for (int32_t t : prompt(9, 3)) longer.push_back(t);
  const auto want = alone(sys, 16), want_longer = alone(longer, 16);
  Runner r(*model_);
  EXPECT_EQ(r.run(sys, 16), want);
  const RequestId again = r.submit(sys, 16);
  ASSERT_TRUE(r.engine->run_until_idle().ok());
  EXPECT_EQ(r.of(again), want);
  EXPECT_EQ(r.cached[again], 64) << "the prompt's last block boundary (69 / 16 * 16) comes from the cache, the window "
                                    "group's blocks before it having been given back";
  const RequestId longer_id = r.submit(longer, 16);
  ASSERT_TRUE(r.engine->run_until_idle().ok());
  EXPECT_EQ(r.of(longer_id), want_longer);
  EXPECT_EQ(r.cached[longer_id], 64);
}

TEST_P(FamilyEngine, ForkedChoicesShareThePrompt) {
  const auto p = prompt(21, 4);
  const auto want = alone(p, 12);
  Runner r(*model_);
  const RequestId id = r.submit(p, 12, 3);
  ASSERT_TRUE(r.engine->run_until_idle().ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.of(id, i), want) << "choice " << i;
}

TEST_P(FamilyEngine, RejectedDraftsRollBackAndGiveTheSameTokens) {
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
    if (k > 1) { EXPECT_LT(st.spec.accepted, st.spec.drafted) << "some drafts were rejected"; }
  }
}

TEST_P(FamilyEngine, PreemptionUnderAFullKvPoolGivesTheSameTokens) {
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

INSTANTIATE_TEST_SUITE_P(Windowed, FamilyEngine, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<Family>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace tessera

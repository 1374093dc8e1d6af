// The late-2026 families through the engine on the CPU, on hybrid memory: Qwen3.5 (Gated
// DeltaNet layers whose recurrent state lives in the KV cache's state pool, with checkpoints),
// Gemma 4 (window-8 layers in a KV pool of their own that gives back the blocks a window no longer
// covers, beside global layers of wider heads, KV sharing; the dense E2B and the 26B-A4B MoE
// shapes) and gpt-oss (window 16 beside full layers, attention sinks, MoE). For each: greedy
// tokens are the argmax of the whole sequence's logits, and a prefix-cache hit (the recurrent
// state restored from its checkpoint), forked choices (the state copied), speculative decoding
// with rejected drafts (the state rolled back) and preemption under a full pool each give exactly
// the tokens of a plain run. The models are the tiny random ones
// tests/model/{qwen35,gemma4,gpt_oss}/make_*.py write as llama.cpp's converter would (their logits
// are checked against float64 numpy forward passes by compare_qwen35.py, compare_gemma4.py and
// compare_gpt_oss.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/registry.h"
#include "core/sched/engine.h"
#include "core/sched/proposer.h"
#include "models/model.h"
#include "models/scoring.h"

namespace tessera {
namespace {

// |n| token ids below |vocab| from |seed|.
std::vector<int32_t> prompt(int n, uint32_t seed, int32_t vocab = 250) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(rng() % uint32_t(vocab)));
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

// Drafts the known greedy continuation, wrong at its second token every third call: some drafts
// are accepted whole, some only in part (the cache, and a recurrent state, roll back and the
// accepted part is computed again).
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

struct Family {
  const char* name;    // the test's suffix
  const char* script;  // under tests/model/
  const char* args;    // after --out DIR
  const char* file;    // the GGUF it writes
  bool recurrent;      // layers with a recurrent state (the state pool's statistics are checked)
};

const Family kFamilies[] = {
    {"qwen35", "qwen35/make_qwen35.py", "--no-vision", "tiny-qwen35-nomtp-f32.gguf", true},
    {"gemma4_e2b", "gemma4/make_gemma4.py", "--no-hf", "tiny-gemma4-f32.gguf", false},
    {"gemma4_26b_moe", "gemma4/make_gemma4.py", "--no-hf --variant 26b", "tiny-gemma4-26b-f32.gguf", false},
    {"gpt_oss", "gpt_oss/make_gpt_oss.py", "", "tiny-gpt-oss-f32.gguf", false},
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
  const EngineStats st = r.engine->stats();
  EXPECT_EQ(st.has_state, GetParam().recurrent);
  if (GetParam().recurrent) {
    EXPECT_GE(st.state.pool.hits, 2);
    EXPECT_EQ(st.state.restored_tokens, 2 * 64) << "both hits restored the state checkpointed at token 64";
  }
}

TEST_P(FamilyEngine, ForkedChoicesShareThePrompt) {
  const auto p = prompt(21, 4);
  const auto want = alone(p, 12);
  Runner r(*model_);
  const RequestId id = r.submit(p, 12, 3);
  ASSERT_TRUE(r.engine->run_until_idle().ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r.of(id, i), want) << "choice " << i;
  if (GetParam().recurrent) { EXPECT_EQ(r.engine->stats().state.forks, 2); }
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

INSTANTIATE_TEST_SUITE_P(Families, FamilyEngine, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<Family>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace tessera

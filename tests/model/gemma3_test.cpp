// Gemma 3 270M (Q4_K_M GGUF, fetched by .ci/fetch-model) end to end: the config read from the
// gemma3.* keys, greedy tokens against the numpy oracle, and the Vulkan device against the CPU.
// Logits against the numpy oracle: tests/model/compare_gemma3.py; against llama.cpp:
// bench/peer/gemma3_vs_llama_cpp.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/registry.h"
#include "core/sched/engine.h"
#include "models/model.h"
#include "tests/model/vulkan_vs_cpu.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

std::string model_path() {
  const char* dir = std::getenv("TESSERA_MODELS");
  return std::string(dir ? dir : "models-cache") + "/gemma-3-270m-q4_k_m.gguf";
}

class Gemma3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    auto m = Model::load(model_path(), Registry::global().find("cpu").value());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; model_ = nullptr; }
  void SetUp() override {
    if (!model_) TESSERA_SKIP_MISSING() << "Gemma 3 270M not found at " << model_path() << " (run .ci/fetch-model)";
  }
  // |n| greedy tokens after |text| (BOS added and special tokens parsed, as `tessera run` does).
  static std::vector<int32_t> greedy(const std::string& text, int n) {
    auto kv = model_->create_kv_cache(512);
    EXPECT_TRUE(kv.ok());
    Engine engine(*model_, **kv, model_->codec());
    GenerationRequest r;
    r.prompt = model_->tokenizer().encode(text, true, true);
    r.sampling = SamplingParams::greedy();
    r.max_tokens = n;
    std::vector<int32_t> out;
    r.on_token = [&](const TokenEvent& ev) {
      if (ev.token >= 0) out.push_back(ev.token);
    };
    EXPECT_TRUE(engine.submit(std::move(r)).ok());
    EXPECT_TRUE(engine.run_until_idle().ok());
    return out;
  }
  static Model* model_;
};
Model* Gemma3::model_ = nullptr;

TEST_F(Gemma3, ConfigMatchesTheFile) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.arch, "gemma3");
  EXPECT_EQ(c.n_layers, 18);
  EXPECT_EQ(c.n_embd, 640);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.n_vocab, 262144);
  EXPECT_TRUE(c.tied_output);
  EXPECT_EQ(c.qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(c.rope.mode, RopeMode::kNeox);
  EXPECT_FLOAT_EQ(c.rope.freq_base, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_sliding.freq_base, 1e4f);
  EXPECT_FLOAT_EQ(c.embd_scale, std::sqrt(640.0f));
  EXPECT_FLOAT_EQ(c.attn_scale, 1.0f / 16.0f);
  EXPECT_EQ(c.sliding_window, 512);
  for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.is_sliding(l), l % 6 != 5) << "layer " << l;
}

// Greedy tokens on the CPU against the float64 numpy oracle's (tests/python/numpy_gemma3.py, run
// token by token on the same prompt ids; recorded with each step's margin between its top two
// logits). The CPU's 8-bit activations move logits by about 2e-2 of their RMS, so the first
// difference is allowed only where the oracle's margin is under 0.1, and the comparison stops
// there (the contexts differ from then on).
TEST_F(Gemma3, GreedyTokensMatchTheNumpyReference) {
  struct Case {
    const char* prompt;
    std::vector<int32_t> ids;
    std::vector<float> margins;
  };
  const std::vector<Case> cases = {
      {"The capital of France is",
       {506, 5279, 529, 506, 2891, 529, 7001, 236761, 1030, 563, 506, 7488, 3207, 528, 7001, 532},
       {0.544f, 1.94f, 2.502f, 0.666f, 0.256f, 0.278f, 0.445f, 0.799f, 0.599f, 2.431f, 0.352f, 0.014f, 2.083f, 2.507f, 0.34f, 0.012f}},
  };
  for (const Case& c : cases) {
    const auto got = greedy(c.prompt, int(c.ids.size()));
    ASSERT_EQ(got.size(), c.ids.size()) << "prompt: " << c.prompt;
    size_t same = 0;
    while (same < got.size() && got[same] == c.ids[same]) ++same;
    std::printf("[ info ] '%s': %zu of %zu greedy tokens equal the oracle's\n", c.prompt, same, c.ids.size());
    if (same < got.size()) {
      EXPECT_LT(c.margins[same], 0.1f) << "prompt '" << c.prompt << "': token " << same << " is " << got[same]
                                       << ", the oracle's " << c.ids[same] << " won by " << c.margins[same];
    }
  }
}

// Short (lavapipe runs a 262k-vocabulary head slowly): 2 prompts x 8 tokens, the rules and the
// tolerance of smollm2_vulkan_test.cpp.
TEST(Gemma3Vulkan, GreedyTokensAndLogitsMatchTheCpuBackend) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "Gemma 3 270M not found at " << model_path();
  model_test::expect_vulkan_matches_cpu(model_path(), {"The capital of France is", "def fibonacci(n):\n"}, 8, DType::kF16,
                                        5e-2, /*add_special=*/true);
}

}  // namespace
}  // namespace tessera

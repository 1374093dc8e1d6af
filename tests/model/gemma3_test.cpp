// Gemma 3 270M (Q4_K_M GGUF, fetched by .ci/fetch-model) end to end: the config read from the
// gemma3.* keys, the tokenizer and greedy tokens against llama.cpp (ids recorded from the peer
// build's llama-tokenize and llama-simple, bench/peer/gemma3_vs_llama_cpp.sh), and the Vulkan
// device against the CPU. Logits against the numpy oracle: tests/model/compare_gemma3.py.
#include <gtest/gtest.h>

#include <cmath>
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
  // |n| greedy tokens after |text| (BOS added and special tokens parsed, as llama-simple does).
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

TEST_F(Gemma3, TokenizesAsLlamaCpp) {
  struct Case {
    const char* text;
    std::vector<int32_t> ids;  // llama-tokenize --ids (BOS added, special tokens parsed)
  };
  const std::vector<Case> cases = {
      // GEMMA3_TOKENIZE_CASES
  };
  for (const Case& c : cases) EXPECT_EQ(model_->tokenizer().encode(c.text, true, true), c.ids) << "text: " << c.text;
}

TEST_F(Gemma3, GreedyTokensMatchLlamaCpp) {
  struct Case {
    const char* prompt;
    std::vector<int32_t> ids;  // llama-simple -n 24 (greedy), the generated ids
  };
  const std::vector<Case> cases = {
      // GEMMA3_GREEDY_CASES
  };
  for (const Case& c : cases) {
    const auto got = greedy(c.prompt, int(c.ids.size()));
    EXPECT_EQ(got, c.ids) << "prompt: " << c.prompt;
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

// SmolLM2-135M-Instruct end to end on the best device: loads, tokenizes, and completes a
// factual prompt greedily. (The logit-level comparison with the numpy reference is in
// tests/model/numpy_reference_test.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/registry.h"
#include "tests/support/test_support.h"
#include "core/sched/engine.h"
#include "models/model.h"
#include "models/scoring.h"
#include "tests/model/steady_decode.h"
#include "tests/model/vulkan_vs_cpu.h"

namespace tessera {
namespace {

std::string model_path() {
  const char* dir = std::getenv("TESSERA_MODELS");
  return std::string(dir ? dir : "models-cache") + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

class SmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    auto m = Model::load(model_path(), Registry::global().find("cpu").value());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; model_ = nullptr; }
  void SetUp() override {
    if (!model_) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path() << " (run .ci/fetch-model)";
  }
  static Model* model_;
};
Model* SmolLM2::model_ = nullptr;

TEST_F(SmolLM2, ConfigMatchesTheFile) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.n_embd, 576);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.n_vocab, 49152);
  EXPECT_TRUE(c.tied_output);
}

TEST_F(SmolLM2, CompletesAFactGreedily) {
  auto kv = model_->create_kv_cache(256);
  ASSERT_TRUE(kv.ok());
  Engine engine(*model_, **kv, model_->codec());
  GenerationRequest r;
  r.prompt = model_->tokenizer().encode("The capital of France is", false, false);
  r.sampling = SamplingParams::greedy();
  r.max_tokens = 8;
  std::string text;
  r.on_token = [&](const TokenEvent& ev) { text += ev.text; };
  ASSERT_TRUE(engine.submit(std::move(r)).ok());
  ASSERT_TRUE(engine.run_until_idle().ok());
  EXPECT_NE(text.find("Paris"), std::string::npos) << "completion: '" << text << "'";
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// HAL v2: a steady decode re-submits one cached executable per block-table bucket (contexts 20
// to 60 cross the 32-token bucket edge once), at batch 1 and batch 8.
// HAL v2: the activation dtype is the device's choice (f32 on the CPU), and a model built in f16
// or bf16 activations (what GPUs' matrix units want) decodes as the f32 one does, within each
// dtype's rounding: greedy tokens equal except at near-ties, logits close.
TEST_F(SmolLM2, HalfPrecisionActivationsMatchF32) {
  EXPECT_EQ(model_->activation_dtype(), DType::kF32);
  for (auto [act, tol] : {std::pair{DType::kF16, 5e-2}, std::pair{DType::kBF16, 8e-2}}) {
    SCOPED_TRACE(dtype_name(act));
    LoadOptions lo;
    lo.activation_dtype = act;
    auto m = Model::load(model_path(), Registry::global().find("cpu").value(), lo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ((*m)->activation_dtype(), act);
    model_test::expect_models_match(*model_, **m, "f32", dtype_name(act),
                                    {"The capital of France is", "def fibonacci(n):\n    "}, 12, DType::kF16, tol, false);
  }
  LoadOptions bad;
  bad.activation_dtype = DType::kQ8_0;
  auto m = Model::load(model_path(), Registry::global().find("cpu").value(), bad);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("activation dtype must be f32, f16 or bf16, got q8_0"), std::string::npos)
      << m.status().to_string();
}

TEST_F(SmolLM2, SteadyDecodeReusesOneExecutablePerBucket) {
  for (int batch : {1, 8}) {
    const auto steps = testing::check_steady_decode(*model_, batch, 20, 41);
    ASSERT_FALSE(steps.empty());
  }
}

}  // namespace
}  // namespace tessera

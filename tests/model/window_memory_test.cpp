// Hybrid memory on a real model: Gemma 3 270M's 15 sliding-window layers (window 512) keep only
// their window's KV blocks in a pool of their own, and give exactly the tokens and log-
// probabilities of a cache where every layer keeps every token (--swa-full): a long prompt, a
// prefix-cache hit on it, and two sequences side by side. The held blocks stay within the window
// plus a partial block at each end (and one step's tokens while a prompt is prefilled).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/registry.h"
#include "core/sched/engine.h"
#include "models/model.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

std::string model_path() {
  const char* dir = std::getenv("TESSERA_MODELS");
  return std::string(dir ? dir : "models-cache") + "/gemma-3-270m-q4_k_m.gguf";
}

struct Generated {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

class WindowMemory : public ::testing::Test {
 protected:
  static constexpr int kSeqs = 2, kBatch = 256, kCtx = 4096;
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(model_path())) return;
    LoadOptions lo;
    lo.max_seqs = kSeqs;
    lo.max_batch_tokens = kBatch;
    auto m = Model::load(model_path(), Registry::global().find("cpu").value(), lo);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() { delete model_; model_ = nullptr; }
  void SetUp() override {
    if (!model_) TESSERA_SKIP_MISSING() << "Gemma 3 270M not found at " << model_path() << " (run .ci/fetch-model)";
  }

  static EngineConfig engine_config() {
    EngineConfig ec;
    ec.scheduler.max_seqs = kSeqs;
    ec.scheduler.max_batch_tokens = kBatch;
    // Plans independent of timing: the two engines compared must split prompts alike (the
    // attention of a key chunk sums in an order that depends on where a step's queries start).
    ec.scheduler.itl_factor = 0;
    return ec;
  }
  // Greedy continuations of |prompts| submitted together (each |n| tokens), with their logprobs.
  static std::vector<Generated> run(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, int n) {
    std::vector<Generated> out(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest r;
      r.prompt = prompts[i];
      r.sampling = SamplingParams::greedy();
      r.sampling.logprobs = 1;
      r.max_tokens = n;
      r.ignore_eos = true;
      r.on_token = [&out, i](const TokenEvent& ev) {
        if (ev.token < 0) return;
        out[i].tokens.push_back(ev.token);
        out[i].logprobs.push_back(ev.logprob);
      };
      EXPECT_TRUE(engine.submit(std::move(r)).ok());
    }
    EXPECT_TRUE(engine.run_until_idle().ok());
    return out;
  }
  static std::vector<int32_t> prompt(int paragraphs, const char* topic) {
    std::string text;
    for (int i = 0; i < paragraphs; ++i)
      text += std::string("Paragraph ") + std::to_string(i) + " about " + topic +
              ": the river bends twice before the old mill, where the miller counts sacks of grain, "
              "each stamped with a number that grows by seven every morning. ";
    text += "Now summarise the numbers in one sentence.";
    return model_->tokenizer().encode(text, true, true);
  }
  static Model* model_;
};
Model* WindowMemory::model_ = nullptr;

TEST_F(WindowMemory, TheWindowPoolHoldsTheWindowAndGivesTheFullCachesTokens) {
  const auto long_prompt = prompt(22, "rivers");  // past the 512-token window
  ASSERT_GT(long_prompt.size(), 700u);
  auto full_kv = model_->create_kv_cache(kCtx, DType::kF16, 16, /*window_memory=*/false);
  auto win_kv = model_->create_kv_cache(kCtx, DType::kF16, 16, /*window_memory=*/true);
  ASSERT_TRUE(full_kv.ok() && win_kv.ok());
  EXPECT_FALSE((*full_kv)->has_window());
  ASSERT_TRUE((*win_kv)->has_window());
  EXPECT_EQ((*win_kv)->n_window_layers(), 15);
  EXPECT_EQ((*win_kv)->config().window, 512);
  // Sized for kSeqs windows and one chunk: a fraction of the context's blocks.
  EXPECT_LT((*win_kv)->config().n_window_blocks, (*win_kv)->config().n_blocks / 2);
  EXPECT_LT((*win_kv)->bytes(), (*full_kv)->bytes() / 2);

  Engine full(*model_, **full_kv, model_->codec(), engine_config());
  Engine win(*model_, **win_kv, model_->codec(), engine_config());
  const auto want = run(full, {long_prompt}, 24);
  const auto got = run(win, {long_prompt}, 24);
  ASSERT_EQ(want[0].tokens.size(), 24u);
  EXPECT_EQ(got[0].tokens, want[0].tokens);
  EXPECT_EQ(got[0].logprobs, want[0].logprobs);  // the same keys, the same kernels: bit for bit

  const EngineStats st = win.stats();
  const int32_t window_blocks = 512 / 16;
  // At the last decode: the window plus a partial block at each end, per window layer...
  EXPECT_LE(st.kv_window_blocks_last_step, window_blocks + 2);
  EXPECT_GE(st.kv_window_blocks_last_step, window_blocks);
  // ... while the full-attention layers hold the whole context.
  EXPECT_EQ(st.kv_blocks_last_step, int32_t((long_prompt.size() + 23 + 15) / 16));
  // While prefilling, one chunk of the prompt more.
  EXPECT_LE(st.kv_window_blocks_peak, window_blocks + kBatch / 16 + 2);
  EXPECT_EQ(st.kv_window, 512);
  EXPECT_EQ(st.kv_bytes_window, 0);  // finished: nothing is held now

  // The same prompt again: a prefix-cache hit on both groups, and the same tokens.
  const auto again = run(win, {long_prompt}, 24);
  EXPECT_EQ(again[0].tokens, want[0].tokens);
  EXPECT_EQ(again[0].logprobs, want[0].logprobs);
  EXPECT_GT(win.stats().sched.cached_tokens, int64_t(long_prompt.size()) - 32);
}

TEST_F(WindowMemory, TwoSequencesSideBySideGiveTheirOwnTokens) {
  const auto a = prompt(14, "mills"), b = prompt(3, "grain");  // one past the window, one within
  auto full_kv = model_->create_kv_cache(kCtx, DType::kF16, 16, false);
  auto win_kv = model_->create_kv_cache(kCtx, DType::kF16, 16, true);
  ASSERT_TRUE(full_kv.ok() && win_kv.ok());
  ASSERT_TRUE((*win_kv)->has_window());
  Engine full(*model_, **full_kv, model_->codec(), engine_config());
  Engine win(*model_, **win_kv, model_->codec(), engine_config());
  const auto want = run(full, {a, b}, 16);
  const auto got = run(win, {a, b}, 16);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(got[size_t(i)].tokens, want[size_t(i)].tokens) << i;
    EXPECT_EQ(got[size_t(i)].logprobs, want[size_t(i)].logprobs) << i;
  }
}

}  // namespace
}  // namespace tessera

// The C API (include/tessera/tessera.h) on a tiny random-weight model: errors carry messages,
// tokenize sizes then fills, and greedy generation reports every token the engine generates for
// the same prompt (raw or through the chat template), in order, with the same text.
#include <gtest/gtest.h>

#include <cmath>

#include <cstddef>
#include <string>
#include <vector>

#include "tessera/tessera.h"
#include "tests/api/reference.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

constexpr int kKvTokens = 512;

struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  int calls = 0;
  int stop_after = -1;  // return non-zero after this many token callbacks (-1: never)
};

int collect(const char* text, size_t length, int32_t token, void* user_data) {
  auto* c = static_cast<Collected*>(user_data);
  ++c->calls;
  c->text.append(text, length);
  if (token >= 0) c->tokens.push_back(token);
  return c->stop_after >= 0 && int(c->tokens.size()) >= c->stop_after ? 1 : 0;
}

class CApi : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    path_ = testing::tiny_model_path(&error);
    ASSERT_TRUE(error.empty()) << error;
    ASSERT_EQ(tessera_model_load(path_.c_str(), "cpu", &model_), TESSERA_OK) << tessera_last_error();
    tessera_context_params cp = tessera_context_default_params();
    cp.kv_tokens = kKvTokens;
    ASSERT_EQ(tessera_context_create(model_, &cp, &ctx_), TESSERA_OK) << tessera_last_error();
  }
  void TearDown() override {
    tessera_context_free(ctx_);
    tessera_model_free(model_);
  }
  static tessera_generate_params greedy(int max_tokens, bool chat_template) {
    tessera_generate_params p = tessera_generate_default_params();
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.use_chat_template = chat_template ? 1 : 0;
    return p;
  }
  std::string path_;
  tessera_model* model_ = nullptr;
  tessera_context* ctx_ = nullptr;
};

TEST_F(CApi, ModelReportsItsShape) {
  EXPECT_EQ(tessera_model_vocab_size(model_), 260);  // 256 bytes + 4 specials
  EXPECT_EQ(tessera_model_context_length(model_), 256);
  EXPECT_EQ(tessera_model_vocab_size(nullptr), 0);
}

TEST(CApiErrors, LoadOfAMissingFileNamesIt) {
  tessera_model* m = reinterpret_cast<tessera_model*>(&m);  // must be reset to NULL
  const std::string path = "/nonexistent/tessera/none.gguf";
  EXPECT_NE(tessera_model_load(path.c_str(), "cpu", &m), TESSERA_OK);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(tessera_last_error()).find(path), std::string::npos) << tessera_last_error();
}

TEST(CApiErrors, UnknownDeviceAndNullArgumentsAreErrors) {
  std::string error;
  const std::string path = testing::tiny_model_path(&error);
  ASSERT_TRUE(error.empty()) << error;
  tessera_model* m = nullptr;
  EXPECT_NE(tessera_model_load(path.c_str(), "no-such-device", &m), TESSERA_OK);
  EXPECT_EQ(m, nullptr);
  EXPECT_STRNE(tessera_last_error(), "");
  EXPECT_EQ(tessera_model_load(nullptr, "cpu", &m), TESSERA_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tessera_last_error()).find("tessera_model_load"), std::string::npos);
  size_t n = 0;
  EXPECT_EQ(tessera_tokenize(nullptr, "x", 1, nullptr, 0, &n), TESSERA_INVALID_ARGUMENT);
  EXPECT_EQ(tessera_generate(nullptr, "x", nullptr, nullptr, nullptr), TESSERA_INVALID_ARGUMENT);
}

// n_threads: 0 is the default, a count is used (clamped to the CPUs), a negative one is an error
// naming it, and a caller's older, shorter struct reads as the defaults for the fields it lacks.
TEST(CApiThreads, ModelParamsSetTheCpuThreads) {
  std::string error;
  const std::string path = testing::tiny_model_path(&error);
  ASSERT_TRUE(error.empty()) << error;
  tessera_model_params p = tessera_model_default_params();
  EXPECT_EQ(p.struct_size, sizeof(tessera_model_params));
  EXPECT_EQ(p.n_threads, 0);
  p.device = "cpu";
  p.n_threads = 1;
  tessera_model* m = nullptr;
  ASSERT_EQ(tessera_model_load_ex(path.c_str(), &p, &m), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(tessera_model_n_threads(m), 1);
  // Generation on it works like any other.
  tessera_context* ctx = nullptr;
  tessera_context_params cp = tessera_context_default_params();
  cp.kv_tokens = kKvTokens;
  ASSERT_EQ(tessera_context_create(m, &cp, &ctx), TESSERA_OK) << tessera_last_error();
  tessera_generate_params gp = tessera_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 8;
  gp.use_chat_template = 0;
  Collected got;
  ASSERT_EQ(tessera_generate(ctx, "Once upon a time", &gp, collect, &got), TESSERA_OK) << tessera_last_error();
  EXPECT_FALSE(got.tokens.empty());
  tessera_context_free(ctx);
  tessera_model_free(m);

  p.n_threads = 10000;  // clamped to the CPUs this process may run on
  p.n_threads_batch = 2;
  ASSERT_EQ(tessera_model_load_ex(path.c_str(), &p, &m), TESSERA_OK) << tessera_last_error();
  EXPECT_GE(tessera_model_n_threads(m), 1);
  EXPECT_LT(tessera_model_n_threads(m), 10000);
  tessera_model_free(m);

  p.n_threads = -3;
  m = reinterpret_cast<tessera_model*>(&m);  // must be reset to NULL
  EXPECT_EQ(tessera_model_load_ex(path.c_str(), &p, &m), TESSERA_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(tessera_last_error()).find("threads must be at least 1"), std::string::npos) << tessera_last_error();

  // A caller compiled when the struct ended at |device|: the thread counts are not read.
  tessera_model_params old = tessera_model_default_params();
  old.struct_size = uint32_t(offsetof(tessera_model_params, n_threads));
  old.device = "cpu";
  old.n_threads = -1;  // past the caller's struct_size: ignored
  ASSERT_EQ(tessera_model_load_ex(path.c_str(), &old, &m), TESSERA_OK) << tessera_last_error();
  EXPECT_GE(tessera_model_n_threads(m), 1);
  tessera_model_free(m);
  old.struct_size = 0;
  EXPECT_EQ(tessera_model_load_ex(path.c_str(), &old, &m), TESSERA_INVALID_ARGUMENT);
  EXPECT_EQ(tessera_model_n_threads(nullptr), 0);
}

TEST_F(CApi, TokenizeSizesThenFills) {
  size_t n = 0;
  ASSERT_EQ(tessera_tokenize(model_, "hi", 1, nullptr, 0, &n), TESSERA_OK);
  ASSERT_EQ(n, 3u);  // BOS + one byte token per byte (no merges)
  std::vector<int32_t> ids(n, -1);
  ASSERT_EQ(tessera_tokenize(model_, "hi", 1, ids.data(), 1, &n), TESSERA_OK);
  EXPECT_EQ(n, 3u);  // the total, though only one id fitted
  EXPECT_EQ(ids[0], 256);
  EXPECT_EQ(ids[1], -1);
  ASSERT_EQ(tessera_tokenize(model_, "hi", 0, ids.data(), ids.size(), &n), TESSERA_OK);
  EXPECT_EQ(n, 2u);
  EXPECT_NE(ids[0], 256);
}

TEST_F(CApi, GreedyGenerationEqualsTheEngine) {
  const std::string prompt = "Once upon a time";
  auto want = testing::engine_greedy(path_, prompt, 24, kKvTokens);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_FALSE(want->tokens.empty());
  Collected got;
  const tessera_generate_params p = greedy(24, false);
  ASSERT_EQ(tessera_generate(ctx_, prompt.c_str(), &p, collect, &got), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(got.tokens, want->tokens);
  EXPECT_EQ(got.text, want->text);
  // A second generation on the same context starts afresh.
  Collected again;
  ASSERT_EQ(tessera_generate(ctx_, prompt.c_str(), &p, collect, &again), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(again.tokens, want->tokens);
}

TEST_F(CApi, ContextsChooseTheirLoraAdapter) {
  const std::string dir = testing::process_temp_dir("capi_lora") + "/adapter";
  ASSERT_TRUE(testing::write_random_adapter(path_, dir, 3).ok());
  const std::string prompt = "Once upon a time";
  auto base = testing::engine_greedy(path_, prompt, 16, kKvTokens);
  auto want = testing::engine_greedy(path_, prompt, 16, kKvTokens, dir);
  ASSERT_TRUE(base.ok() && want.ok());
  ASSERT_NE(base->tokens, want->tokens) << "the adapter must change the tokens for this test to mean something";

  int32_t slot = -1;
  ASSERT_EQ(tessera_model_load_lora(model_, "styled", dir.c_str(), &slot), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(slot, 0);
  EXPECT_EQ(tessera_model_n_loras(model_), 1);
  EXPECT_STREQ(tessera_model_lora_name(model_, 0), "styled");
  EXPECT_EQ(tessera_model_lora_name(model_, 1), nullptr);
  EXPECT_EQ(tessera_model_load_lora(model_, "styled", dir.c_str(), nullptr), TESSERA_INVALID_ARGUMENT)
      << "a name loaded twice";
  EXPECT_NE(std::string(tessera_last_error()).find("already loaded"), std::string::npos) << tessera_last_error();
  EXPECT_NE(tessera_model_load_lora(model_, "missing", (dir + "-nowhere").c_str(), nullptr), TESSERA_OK);

  const tessera_generate_params p = greedy(16, false);
  Collected plain;  // a context starts on the base model
  ASSERT_EQ(tessera_generate(ctx_, prompt.c_str(), &p, collect, &plain), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(plain.tokens, base->tokens);
  ASSERT_EQ(tessera_context_set_lora(ctx_, slot), TESSERA_OK);
  Collected styled;
  ASSERT_EQ(tessera_generate(ctx_, prompt.c_str(), &p, collect, &styled), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(styled.tokens, want->tokens);
  ASSERT_EQ(tessera_context_set_lora(ctx_, -1), TESSERA_OK);
  Collected back;
  ASSERT_EQ(tessera_generate(ctx_, prompt.c_str(), &p, collect, &back), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(back.tokens, base->tokens);
  EXPECT_EQ(tessera_context_set_lora(ctx_, 1), TESSERA_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tessera_last_error()).find("slot 1 is not loaded"), std::string::npos) << tessera_last_error();
  // A scale: 1 is the adapter as loaded, 0 the base model, NaN an error.
  ASSERT_EQ(tessera_context_set_lora_scaled(ctx_, slot, 1.0f), TESSERA_OK);
  Collected one;
  ASSERT_EQ(tessera_generate(ctx_, prompt.c_str(), &p, collect, &one), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(one.tokens, want->tokens);
  ASSERT_EQ(tessera_context_set_lora_scaled(ctx_, slot, 0.0f), TESSERA_OK);
  Collected zero;
  ASSERT_EQ(tessera_generate(ctx_, prompt.c_str(), &p, collect, &zero), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(zero.tokens, base->tokens);
  EXPECT_EQ(tessera_context_set_lora_scaled(ctx_, slot, std::nanf("")), TESSERA_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tessera_last_error()).find("finite"), std::string::npos) << tessera_last_error();
}

TEST_F(CApi, ChatTemplateRendersTheUserMessage) {
  // make_tiny_model's ChatML template, written out.
  auto want = testing::engine_greedy(path_, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", 12, kKvTokens);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  Collected got;
  const tessera_generate_params p = greedy(12, true);
  ASSERT_EQ(tessera_generate(ctx_, "hi", &p, collect, &got), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(got.tokens, want->tokens);
  EXPECT_EQ(got.text, want->text);
}

TEST_F(CApi, CallbackStopsGeneration) {
  auto want = testing::engine_greedy(path_, "abc", 16, kKvTokens);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_GE(want->tokens.size(), 4u) << "the tiny model ended too early for this test";
  Collected got;
  got.stop_after = 3;
  const tessera_generate_params p = greedy(16, false);
  ASSERT_EQ(tessera_generate(ctx_, "abc", &p, collect, &got), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(got.tokens, std::vector<int32_t>(want->tokens.begin(), want->tokens.begin() + 3));
  EXPECT_EQ(got.calls, 3);  // nothing after the stop, not even held-back text
}

}  // namespace
}  // namespace tessera

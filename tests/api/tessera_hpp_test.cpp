// include/tessera/tessera.hpp on the tiny model: its output is the C API's and the engine's,
// errors arrive as tessera::api::Error with the C API's code and message, handles are move-only
// and a moved-from handle is an error, and a callback's exception comes back out of generate().
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/tessera.hpp"
#include "tests/api/reference.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

static_assert(!std::is_copy_constructible_v<api::Model> && !std::is_copy_assignable_v<api::Model>);
static_assert(std::is_nothrow_move_constructible_v<api::Model> && std::is_nothrow_move_assignable_v<api::Model>);
static_assert(!std::is_copy_constructible_v<api::Context> && !std::is_copy_assignable_v<api::Context>);
static_assert(std::is_nothrow_move_constructible_v<api::Context> && std::is_nothrow_move_assignable_v<api::Context>);

constexpr int kKvTokens = 512;

api::GenerateParams greedy(int max_tokens) {
  api::GenerateParams p = api::default_generate_params();
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.use_chat_template = 0;
  return p;
}

api::ContextParams small_kv() {
  api::ContextParams c = api::default_context_params();
  c.kv_tokens = kKvTokens;
  return c;
}

class TesseraHpp : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    path_ = testing::tiny_model_path(&error);
    ASSERT_TRUE(error.empty()) << error;
  }
  std::string path_;
};

TEST_F(TesseraHpp, GenerateEqualsTheCApiAndTheEngine) {
  const std::string prompt = "The quick brown fox";
  auto want = testing::engine_greedy(path_, prompt, 20, kKvTokens);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_FALSE(want->tokens.empty());

  const api::Model model = api::Model::load(path_, "cpu");
  api::Context ctx(model, small_kv());
  const api::Completion got = ctx.generate(prompt, greedy(20));
  EXPECT_EQ(got.tokens, want->tokens);
  EXPECT_EQ(got.text, want->text);

  // The same call through the C functions on the wrapper's handles.
  std::vector<int32_t> c_tokens;
  const tessera_generate_params p = greedy(20);
  const tessera_token_callback cb = [](const char*, size_t, int32_t token, void* user) {
    if (token >= 0) static_cast<std::vector<int32_t>*>(user)->push_back(token);
    return 0;
  };
  ASSERT_EQ(tessera_generate(ctx.handle(), prompt.c_str(), &p, cb, &c_tokens), TESSERA_OK) << tessera_last_error();
  EXPECT_EQ(c_tokens, got.tokens);
}

TEST_F(TesseraHpp, LoraAdapterPerContext) {
  const std::string dir = testing::process_temp_dir("hpp_lora") + "/adapter";
  ASSERT_TRUE(testing::write_random_adapter(path_, dir, 4).ok());
  auto want = testing::engine_greedy(path_, "abc", 12, kKvTokens, dir);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  api::Model model = api::Model::load(path_, "cpu");
  EXPECT_EQ(model.load_lora("mine", dir), 0);
  EXPECT_EQ(model.n_loras(), 1);
  api::Context ctx(model, small_kv());
  ctx.set_lora(0);
  EXPECT_EQ(ctx.generate("abc", greedy(12)).tokens, want->tokens);
  EXPECT_THROW(ctx.set_lora(3), api::Error);
  EXPECT_THROW((void)model.load_lora("mine", dir), api::Error);
}

TEST_F(TesseraHpp, ModelAnswersLikeTheCApi) {
  const api::Model model = api::Model::load(path_, "cpu");
  EXPECT_EQ(model.vocab_size(), tessera_model_vocab_size(model.handle()));
  EXPECT_EQ(model.vocab_size(), 260);
  EXPECT_EQ(model.context_length(), 256);
  const std::vector<int32_t> ids = model.tokenize("hello");
  ASSERT_EQ(ids.size(), 6u);  // BOS + 5 bytes
  EXPECT_EQ(ids[0], 256);
  EXPECT_EQ(model.tokenize("hello", false), std::vector<int32_t>(ids.begin() + 1, ids.end()));
  EXPECT_TRUE(model.tokenize("").size() == 1u);  // BOS only
  EXPECT_EQ(api::version(), tessera_version());
}

TEST_F(TesseraHpp, FailuresThrowTheCApiError) {
  const std::string missing = "/nonexistent/tessera/none.gguf";
  try {
    (void)api::Model::load(missing, "cpu");
    FAIL() << "loading " << missing << " did not throw";
  } catch (const api::Error& e) {
    EXPECT_NE(e.code(), TESSERA_OK);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  try {
    (void)api::Model::load(path_, "no-such-device");
    FAIL() << "an unknown device did not throw";
  } catch (const api::Error& e) {
    EXPECT_NE(e.code(), TESSERA_OK);
    EXPECT_STRNE(e.what(), "");
  }
}

TEST_F(TesseraHpp, MovedFromHandlesAreErrorsAndMovedToOnesWork) {
  api::Model a = api::Model::load(path_, "cpu");
  api::Model b = std::move(a);
  EXPECT_EQ(b.vocab_size(), 260);
  try {
    (void)a.vocab_size();  // NOLINT(bugprone-use-after-move): the behaviour under test
    FAIL() << "a moved-from Model did not throw";
  } catch (const api::Error& e) {
    EXPECT_EQ(e.code(), TESSERA_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("moved from"), std::string::npos) << e.what();
  }
  api::Model c = api::Model::load(path_, "cpu");
  c = std::move(b);  // frees c's own model
  api::Context x(c, small_kv());
  api::Context y = std::move(x);
  EXPECT_THROW((void)x.generate("a", greedy(2)), api::Error);  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(y.generate("a", greedy(2)).tokens.empty());
}

TEST_F(TesseraHpp, StreamingStopsWhenTheCallbackSaysSo) {
  auto want = testing::engine_greedy(path_, "xyz", 16, kKvTokens);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_GE(want->tokens.size(), 3u) << "the tiny model ended too early for this test";
  const api::Model model = api::Model::load(path_, "cpu");
  api::Context ctx(model, small_kv());
  std::vector<int32_t> got;
  ctx.generate("xyz", greedy(16), [&](std::string_view, int32_t token) {
    if (token >= 0) got.push_back(token);
    return got.size() < 2;
  });
  EXPECT_EQ(got, std::vector<int32_t>(want->tokens.begin(), want->tokens.begin() + 2));
}

TEST_F(TesseraHpp, CallbackExceptionComesBackOutOfGenerate) {
  const api::Model model = api::Model::load(path_, "cpu");
  api::Context ctx(model, small_kv());
  int calls = 0;
  EXPECT_THROW(ctx.generate("xyz", greedy(16),
                            [&](std::string_view, int32_t) -> bool {
                              if (++calls == 2) throw std::logic_error("stop here");
                              return true;
                            }),
               std::logic_error);
  EXPECT_EQ(calls, 2);  // the C side stopped calling once the callback threw
  // The context is still usable, and gives the same output as a fresh one.
  auto want = testing::engine_greedy(path_, "xyz", 16, kKvTokens);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  EXPECT_EQ(ctx.generate("xyz", greedy(16)).tokens, want->tokens);
}

// ModelParams reach tessera_model_load_ex: a thread count is used, a negative one throws.
TEST(TesseraHppThreads, ModelParamsSetTheCpuThreads) {
  std::string error;
  const std::string path = testing::tiny_model_path(&error);
  ASSERT_TRUE(error.empty()) << error;
  api::ModelParams p;
  p.device = "cpu";
  p.n_threads = 1;
  const api::Model m = api::Model::load(path, p);
  EXPECT_EQ(m.n_threads(), 1);
  p.n_threads = -1;
  EXPECT_THROW(api::Model::load(path, p), api::Error);
}

}  // namespace
}  // namespace tessera

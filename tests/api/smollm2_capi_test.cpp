// SmolLM2-135M-Instruct through include/tessera/tessera.hpp (and so the C API): the greedy token
// ids equal the engine's for the same prompt, and the answers are the facts the model knows.
// The model is fetched by .ci/fetch-model; without it this test fails (it never skips).
#include <gtest/gtest.h>

#include <string>

#include "tessera/tessera.hpp"
#include "tests/api/reference.h"

namespace tessera {
namespace {

TEST(SmolLM2Api, GreedyTokensEqualTheEngineAndNameParis) {
  const std::string path = testing::smollm2_path();
  const std::string prompt = "The capital of France is";
  auto want = testing::engine_greedy(path, prompt, 8, 256);
  ASSERT_TRUE(want.ok()) << want.status().to_string() << " (run .ci/fetch-model)";

  const api::Model model = api::Model::load(path, "cpu");
  EXPECT_EQ(model.vocab_size(), 49152);
  api::ContextParams cp = api::default_context_params();
  cp.kv_tokens = 256;
  api::Context ctx(model, cp);
  api::GenerateParams p = api::default_generate_params();
  p.temperature = 0.0f;
  p.max_tokens = 8;
  p.use_chat_template = 0;
  const api::Completion got = ctx.generate(prompt, p);
  EXPECT_EQ(got.tokens, want->tokens);
  EXPECT_EQ(got.text, want->text);
  EXPECT_NE(got.text.find("Paris"), std::string::npos) << "completion: '" << got.text << "'";

  // The chat path, as examples/c/embed.c and examples/cpp/embed.cpp use it.
  p.use_chat_template = 1;
  p.max_tokens = 24;
  const api::Completion chat = ctx.generate("What is the capital of France? Answer in one sentence.", p);
  EXPECT_NE(chat.text.find("Paris"), std::string::npos) << "answer: '" << chat.text << "'";
}

}  // namespace
}  // namespace tessera

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/sched/sampler.h"

namespace tessera {
namespace {

TEST(Sampler, GreedyPicksTheArgmax) {
  Sampler s(SamplingParams::greedy());
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
  EXPECT_EQ(s.sample(logits.data(), 4, {}).token, 1);
}

TEST(Sampler, SameSeedSameTokensAndDistributionFollowsSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // probabilities 1/4, 3/4
  Sampler a(p), b(p);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const int32_t x = a.sample(logits.data(), 2, {}).token;
    EXPECT_EQ(x, b.sample(logits.data(), 2, {}).token);
    ones += x;
  }
  EXPECT_NEAR(double(ones) / n, 0.75, 0.015);
}

TEST(Sampler, TopKAndMinPRestrictTheCandidates) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 7;
  const std::vector<float> logits = {3.0f, 2.9f, 2.8f, -5.0f};
  Sampler s(p);
  for (int i = 0; i < 500; ++i) EXPECT_LT(s.sample(logits.data(), 4, {}).token, 2);
  p.top_k = 0;
  p.min_p = 0.99f;  // only tokens within 1% of the best survive: just token 0
  Sampler m(p);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(m.sample(logits.data(), 4, {}).token, 0);
}

TEST(Sampler, RepetitionPenaltyDemotesSeenTokens) {
  SamplingParams p = SamplingParams::greedy();
  p.repetition_penalty = 2.0f;
  const std::vector<float> logits = {2.0f, 1.5f};
  Sampler s(p);
  EXPECT_EQ(s.sample(logits.data(), 2, {0}).token, 1);  // 2.0 / 2 = 1.0 < 1.5
}

TEST(Sampler, ReportsLogprobs) {
  SamplingParams p = SamplingParams::greedy();
  p.logprobs = 2;
  const std::vector<float> logits = {0.0f, 0.0f, std::log(2.0f)};
  Sampler s(p);
  const auto r = s.sample(logits.data(), 3, {});
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, std::log(0.5), 1e-5);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 2);
}

TEST(Sampler, ValidatesSettings) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p = SamplingParams{};
  p.temperature = -1.0f;
  EXPECT_FALSE(p.validate().ok());
}

}  // namespace
}  // namespace tessera

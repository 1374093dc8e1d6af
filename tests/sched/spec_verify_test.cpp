// verify_draft on hand-made rows: greedy accepts exactly the argmax; sampled, a one-hot draft is
// accepted with probability p(x) and every emitted first token follows p.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/sched/spec_verify.h"

namespace tessera {
namespace {

TEST(SpecVerify, GreedyAcceptsTheArgmaxPrefixThenCorrects) {
  Sampler s(SamplingParams::greedy());
  // Rows: argmax 2, then 0, then 3 (the row after a full draft is the bonus).
  const std::vector<float> logits = {0, 1, 5, 0, /**/ 4, 1, 0, 0, /**/ 0, 0, 1, 9};
  const std::vector<int32_t> both = {2, 0};
  VerifyResult v = verify_draft(s, logits.data(), 4, both, {}, {1});
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{2, 0, 3}));
  const std::vector<int32_t> second_wrong = {2, 1};
  v = verify_draft(s, logits.data(), 4, second_wrong, {}, {1});
  EXPECT_EQ(v.accepted, 1);
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{2, 0}));
  const std::vector<int32_t> first_wrong = {3, 0};
  v = verify_draft(s, logits.data(), 4, first_wrong, {}, {1});
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{2}));
}

SamplingParams plain_sampling(uint64_t seed) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

TEST(SpecVerify, OneHotDraftIsAcceptedWithProbabilityPAndTheFirstTokenFollowsP) {
  // p = (0.1, 0.2, 0.3, 0.4); the draft proposes token 1.
  const std::vector<float> row = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  std::vector<float> logits = row;
  logits.insert(logits.end(), row.begin(), row.end());
  Sampler s(plain_sampling(3));
  const int n = 40000;
  int accepted = 0;
  std::vector<int> first(4, 0);
  const std::vector<int32_t> draft = {1};
  for (int i = 0; i < n; ++i) {
    const VerifyResult v = verify_draft(s, logits.data(), 4, draft, {}, {});
    accepted += v.accepted;
    ++first[size_t(v.tokens[0])];
  }
  EXPECT_NEAR(double(accepted) / n, 0.2, 0.01);
  const double p[4] = {0.1, 0.2, 0.3, 0.4};
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(double(first[size_t(t)]) / n, p[t], 0.01) << "token " << t;
}

TEST(SpecVerify, DenseDraftDistributionKeepsTheTargetDistribution) {
  // p = (0.1, 0.2, 0.3, 0.4), q = (0.4, 0.3, 0.2, 0.1); the draft token is drawn from q.
  const std::vector<float> row = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  std::vector<float> logits = row;
  logits.insert(logits.end(), row.begin(), row.end());
  const std::vector<float> q = {0.4f, 0.3f, 0.2f, 0.1f};
  Sampler s(plain_sampling(5));
  std::mt19937_64 rng(11);
  std::discrete_distribution<int32_t> from_q(q.begin(), q.end());
  const int n = 40000;
  std::vector<int> first(4, 0);
  for (int i = 0; i < n; ++i) {
    const std::vector<int32_t> draft = {from_q(rng)};
    ++first[size_t(verify_draft(s, logits.data(), 4, draft, q, {}).tokens[0])];
  }
  const double p[4] = {0.1, 0.2, 0.3, 0.4};
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(double(first[size_t(t)]) / n, p[t], 0.01) << "token " << t;
}

}  // namespace
}  // namespace tessera

// Sampler: picks the next token from one row of logits, on the host. Per request, so one batch
// mixes settings. Order (as in common engines): penalties -> temperature -> top-k -> top-p ->
// min-p -> draw. temperature <= 0 is greedy.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "core/sched/grammar.h"
#include "core/status.h"

namespace tessera {

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off
  float repetition_penalty = 1.0f;   // 1: off (divides positive logits, multiplies negative)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int penalty_last_n = 64;      // tokens of history the penalties look at (<0: all)
  uint64_t seed = 0;            // 0: a random seed per request
  int logprobs = 0;             // how many top log-probabilities to report per token (0: none)

  static SamplingParams greedy() {
    SamplingParams p;
    p.temperature = 0.0f;
    return p;
  }
  Status validate() const;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;              // of the chosen token under the model's distribution
  std::vector<TokenLogprob> top;     // the |logprobs| most likely tokens
};

// The distribution a Sampler draws from for one row: the tokens that survive the penalties,
// temperature, top-k, top-p and min-p, with probabilities proportional to |prob| (sum: |mass|).
// Greedy: one token with probability 1.
struct Candidates {
  std::vector<std::pair<int32_t, double>> items;  // (token, unnormalised probability), most likely first
  double mass = 0.0;
  // The normalised probability of |token| (0 when it did not survive).
  double prob(int32_t token) const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // |history|: the sequence's tokens so far (prompt + generated) for the penalties. |allowed|:
  // a token bitmask (core/sched/grammar.h) or null; a masked token's logit counts as -inf, so it
  // is never drawn (the caller makes sure at least one token is allowed). Reported logprobs are
  // the model's, before the mask.
  SampleResult sample(const float* logits, int32_t vocab, const std::vector<int32_t>& history,
                      const uint32_t* allowed = nullptr);

  // The pieces of sample, for speculative verification (core/sched/spec_verify.h), which must
  // draw from exactly the distribution sample draws from. No candidates when |allowed| allows
  // no token.
  Candidates candidates(const float* logits, int32_t vocab, const std::vector<int32_t>& history,
                        const uint32_t* allowed = nullptr);
  // A token drawn from |c| (one uniform draw; none for a single candidate).
  int32_t draw(const Candidates& c);
  // A uniform draw in [0, 1).
  double uniform();
  // The logprob of |token| under the model's own distribution of |logits| (before penalties and
  // temperature) and, when params.logprobs > 0, the top ones: fills all of |r| but the draw.
  void describe(const float* logits, int32_t vocab, int32_t token, SampleResult* r) const;
  bool greedy() const { return p_.temperature <= 0.0f; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

}  // namespace tessera

#include "core/sched/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

namespace tessera {

Status SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return InvalidArgument("temperature must be >= 0, got " + std::to_string(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgument("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return InvalidArgument("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!(repetition_penalty > 0.0f)) return InvalidArgument("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  if (logprobs < 0 || logprobs > 20) return InvalidArgument("logprobs must be in [0, 20], got " + std::to_string(logprobs));
  return OkStatus();
}

Sampler::Sampler(const SamplingParams& params) : p_(params), rng_(params.seed ? params.seed : std::random_device{}()) {}

namespace {
// log(sum(exp(x))) over |n| values, in one pass after the max (float exps, a double sum).
float log_sum_exp(const float* x, int32_t n) {
  const float mx = *std::max_element(x, x + n);
  double sum = 0.0;
  for (int32_t i = 0; i < n; ++i) sum += double(std::exp(x[i] - mx));
  return mx + float(std::log(sum));
}
}  // namespace

double Candidates::prob(int32_t token) const {
  for (const auto& [t, q] : items)
    if (t == token) return mass > 0 ? q / mass : 0.0;
  return 0.0;
}

Candidates Sampler::candidates(const float* logits_in, int32_t vocab, const std::vector<int32_t>& history,
                               const uint32_t* allowed) {
  // Penalties over the recent history, on a copy (none without penalties: the vocabulary is large).
  const float* logits = logits_in;
  std::vector<float> penalised;
  if (p_.repetition_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    penalised.assign(logits_in, logits_in + vocab);
    logits = penalised.data();
    std::unordered_map<int32_t, int> counts;
    const size_t n = p_.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(p_.penalty_last_n));
    for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
    for (auto [tok, c] : counts) {
      if (tok < 0 || tok >= vocab) continue;
      float& l = penalised[size_t(tok)];
      l = l > 0.0f ? l / p_.repetition_penalty : l * p_.repetition_penalty;
      l -= p_.presence_penalty + p_.frequency_penalty * float(c);
    }
  }
  // The grammar's mask: masked tokens are never candidates (a zero-probability candidate could
  // still be picked by the draw's rounding).
  Candidates c;
  if (p_.temperature <= 0.0f) {
    int32_t best = -1;
    if (!allowed) best = int32_t(std::max_element(logits, logits + vocab) - logits);
    else
      for (int32_t i = 0; i < vocab; ++i)
        if (mask_allows(allowed, i) && (best < 0 || logits[size_t(i)] > logits[size_t(best)])) best = i;
    if (best < 0) return c;  // a mask that allows nothing: no candidates
    c.items.push_back({best, 1.0});
    c.mass = 1.0;
    return c;
  }
  scratch_.clear();
  for (int32_t i = 0; i < vocab; ++i)
    if (!allowed || mask_allows(allowed, i)) scratch_.push_back({logits[size_t(i)] / p_.temperature, i});
  if (scratch_.empty()) return c;  // a mask that allows nothing: no candidates
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = scratch_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < keep) {
    keep = size_t(p_.top_k);
    std::partial_sort(scratch_.begin(), scratch_.begin() + long(keep), scratch_.end(), by_logit);
  } else {
    std::sort(scratch_.begin(), scratch_.end(), by_logit);
  }
  scratch_.resize(keep);
  // Softmax over the kept candidates.
  const float mx = scratch_[0].first;
  std::vector<double> prob(keep);
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) { prob[i] = std::exp(double(scratch_[i].first - mx)); sum += prob[i]; }
  for (double& q : prob) q /= sum;
  // top-p: the smallest prefix whose mass reaches top_p (at least one token).
  if (p_.top_p < 1.0f) {
    double acc = 0.0;
    size_t n = 0;
    while (n < keep) { acc += prob[n++]; if (acc >= p_.top_p) break; }
    keep = std::max<size_t>(1, n);
  }
  // min-p: drop tokens below min_p times the best one's probability.
  if (p_.min_p > 0.0f) {
    size_t n = 1;
    while (n < keep && prob[n] >= p_.min_p * prob[0]) ++n;
    keep = n;
  }
  for (size_t i = 0; i < keep; ++i) {
    c.items.push_back({scratch_[i].second, prob[i]});
    c.mass += prob[i];
  }
  return c;
}

int32_t Sampler::draw(const Candidates& c) {
  if (p_.temperature <= 0.0f) return c.items.front().first;
  std::uniform_real_distribution<double> u(0.0, c.mass);
  double r = u(rng_);
  size_t pick = 0;
  for (; pick + 1 < c.items.size(); ++pick) {
    r -= c.items[pick].second;
    if (r <= 0.0) break;
  }
  return c.items[pick].first;
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

void Sampler::describe(const float* logits, int32_t vocab, int32_t token, SampleResult* out) const {
  // Log-probabilities as the model gives them (before penalties and temperature), for reporting:
  // logit - log(sum(exp(logits))), without a copy of the row.
  const float lse = log_sum_exp(logits, vocab);
  out->token = token;
  out->logprob = logits[size_t(token)] - lse;
  out->top.clear();
  if (p_.logprobs > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    for (int32_t i = 0; i < vocab; ++i) idx[size_t(i)] = i;
    const size_t k = std::min<size_t>(size_t(p_.logprobs), size_t(vocab));
    std::partial_sort(idx.begin(), idx.begin() + long(k), idx.end(),
                      [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
    for (size_t i = 0; i < k; ++i) out->top.push_back({idx[i], logits[size_t(idx[i])] - lse});
  }
}

SampleResult Sampler::sample(const float* logits, int32_t vocab, const std::vector<int32_t>& history,
                             const uint32_t* allowed) {
  SampleResult out;
  describe(logits, vocab, draw(candidates(logits, vocab, history, allowed)), &out);
  return out;
}

}  // namespace tessera

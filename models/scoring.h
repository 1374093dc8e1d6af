// Scoring a fixed token sequence with a model: the logits of every position (for `tessera
// eval`, perplexity and the numerical tests against the numpy reference).
#pragma once
#include <cstdint>
#include <vector>

#include "models/model.h"

namespace tessera {

// Logits [tokens.size() - first_row, vocab] of the positions from |first_row| on (earlier ones
// skip the output head), computed in chunks of |chunk| tokens through a private KV cache.
Status eval_logits(Model& model, const std::vector<int32_t>& tokens, int chunk, std::vector<float>* logits,
                   DType kv_dtype = DType::kF16, int64_t first_row = 0);

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;
  int64_t scored_tokens = 0;
  int windows = 0;
};
// llama.cpp's method: non-overlapping windows of |n_ctx| tokens, each scored on its second half;
// when the tokenizer adds BOS, each window's first token is replaced by BOS (as llama-perplexity
// does: models such as Gemma drift far without it).
// |progress| (may be null) is called after each window. |on_row| (may be null) sees each scored
// position's logits (vocab floats) in order, with the token that follows it; an error stops the
// run (KL divergence against a baseline uses it).
using ScoredRowFn = std::function<Status(const float* logits, int32_t next_token)>;
Result<PerplexityResult> perplexity(Model& model, const std::vector<int32_t>& tokens, int n_ctx,
                                    const std::function<void(int, int, double)>& progress,
                                    const ScoredRowFn& on_row = nullptr);
// Positions perplexity() scores for |n_tokens| tokens in windows of |n_ctx|.
int64_t perplexity_scored_positions(int64_t n_tokens, int n_ctx);

}  // namespace tessera

// Scoring a fixed token sequence with a model: the logits of every position (for `tessera
// eval`, perplexity and the numerical tests against the numpy reference).
#pragma once
#include <cstdint>
#include <vector>

#include "models/model.h"

namespace tessera {

// Logits [tokens.size(), vocab] of every position, computed in chunks of |chunk| tokens through
// a private KV cache.
Status eval_logits(Model& model, const std::vector<int32_t>& tokens, int chunk, std::vector<float>* logits,
                   DType kv_dtype = DType::kF16);

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;
  int64_t scored_tokens = 0;
  int windows = 0;
};
// llama.cpp's method: non-overlapping windows of |n_ctx| tokens, each scored on its second half.
// |progress| (may be null) is called after each window.
Result<PerplexityResult> perplexity(Model& model, const std::vector<int32_t>& tokens, int n_ctx,
                                    const std::function<void(int, int, double)>& progress);

}  // namespace tessera

#include "models/scoring.h"

#include <algorithm>
#include <cmath>

namespace tessera {

namespace {
// A plan for |n| tokens of one sequence starting at |start|, the rows of positions >= |first_row|
// producing logits.
StepPlan chunk_plan(const std::vector<int32_t>& tokens, int64_t start, int64_t n, const std::vector<BlockId>& blocks,
                    int block_size, int64_t first_row, int32_t state_slot) {
  StepPlan p;
  if (state_slot >= 0) p.state_slots = {state_slot};
  p.query_start = {0, int32_t(n)};
  p.seq_lens = {int32_t(start + n)};
  p.max_blocks = int32_t(blocks.size());
  p.block_tables.assign(blocks.begin(), blocks.end());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = start + i;
    p.tokens.push_back(tokens[size_t(pos)]);
    p.positions.push_back(int32_t(pos));
    p.slot_mapping.push_back(blocks[size_t(pos / block_size)] * block_size + int32_t(pos % block_size));
    if (pos >= first_row) p.logit_rows.push_back(int32_t(i));
  }
  return p;
}
}  // namespace

Status eval_logits(Model& model, const std::vector<int32_t>& tokens, int chunk, std::vector<float>* logits,
                   DType kv_dtype, int64_t first_row) {
  const int64_t T = int64_t(tokens.size());
  if (T == 0) return InvalidArgument("eval: no tokens");
  if (first_row < 0 || first_row >= T)
    return InvalidArgument("eval: first logits row " + std::to_string(first_row) + " outside the " + std::to_string(T) + " tokens");
  if (T > model.context_length())
    return InvalidArgument("eval: " + std::to_string(T) + " tokens exceed the context of " + std::to_string(model.context_length()));
  TS_ASSIGN_OR_RETURN(auto kv, model.create_kv_cache(T, kv_dtype));
  const int bs = kv->config().block_size;
  std::vector<BlockId> blocks;
  for (int64_t b = 0; b < (T + bs - 1) / bs; ++b) blocks.push_back(*kv->pool().allocate());
  // Recurrent layers: one state slot, zeroed (the sequence's start).
  int32_t slot = -1;
  if (RecurrentStatePool* states = kv->states()) {
    slot = *states->allocate();
    TS_RETURN_IF_ERROR(states->zero({&slot, 1}));
  }
  const size_t V = size_t(model.vocab_size());
  logits->assign(size_t(T - first_row) * V, 0.0f);
  std::vector<float> part;
  for (int64_t start = 0; start < T; start += chunk) {
    const int64_t n = std::min<int64_t>(chunk, T - start);
    TS_RETURN_IF_ERROR(model.forward(chunk_plan(tokens, start, n, blocks, bs, first_row, slot), *kv, &part));
    const int64_t row = std::max<int64_t>(start, first_row) - first_row;  // first output row of this chunk
    std::copy(part.begin(), part.end(), logits->begin() + long(size_t(row) * V));
  }
  return OkStatus();
}

int64_t perplexity_scored_positions(int64_t n_tokens, int n_ctx) {
  if (n_ctx < 4) return 0;
  return n_tokens / n_ctx * (n_ctx - 1 - n_ctx / 2);
}

Result<PerplexityResult> perplexity(Model& model, const std::vector<int32_t>& tokens, int n_ctx,
                                    const std::function<void(int, int, double)>& progress, const ScoredRowFn& on_row) {
  if (n_ctx < 4) return InvalidArgument("perplexity: context " + std::to_string(n_ctx) + " is too small");
  const int windows = int(int64_t(tokens.size()) / n_ctx);
  if (windows == 0)
    return InvalidArgument("perplexity: the text has " + std::to_string(tokens.size()) + " tokens, fewer than one window of " +
                           std::to_string(n_ctx));
  PerplexityResult r;
  r.windows = windows;
  double nll = 0.0;
  const size_t V = size_t(model.vocab_size());
  std::vector<float> logits;
  const int32_t bos = model.tokenizer().add_bos() ? model.tokenizer().bos() : -1;
  for (int w = 0; w < windows; ++w) {
    std::vector<int32_t> window(tokens.begin() + long(w) * n_ctx, tokens.begin() + long(w + 1) * n_ctx);
    if (bos >= 0) window[0] = bos;  // not scored: position 0 only conditions the others
    // Score the second half (only its rows need the output head): position i predicts token i + 1.
    TS_RETURN_IF_ERROR(eval_logits(model, window, 512, &logits, DType::kF16, n_ctx / 2));
    for (int i = n_ctx / 2; i < n_ctx - 1; ++i) {
      const float* row = logits.data() + size_t(i - n_ctx / 2) * V;
      double mx = row[0];
      for (size_t j = 1; j < V; ++j) mx = std::max(mx, double(row[j]));
      double sum = 0.0;
      for (size_t j = 0; j < V; ++j) sum += std::exp(double(row[j]) - mx);
      nll += -(double(row[size_t(window[size_t(i + 1)])]) - mx - std::log(sum));
      ++r.scored_tokens;
      if (on_row) {
        TS_RETURN_IF_ERROR(on_row(row, window[size_t(i + 1)]));
      }
    }
    if (progress) progress(w + 1, windows, std::exp(nll / double(r.scored_tokens)));
  }
  r.mean_nll = nll / double(r.scored_tokens);
  r.perplexity = std::exp(r.mean_nll);
  return r;
}

}  // namespace tessera

#include "core/sched/ngram_proposer.h"

#include <algorithm>

namespace tessera {

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> tokens, int32_t k, const NgramConfig& cfg) {
  const int64_t len = int64_t(tokens.size());
  const int64_t lo = std::max<int64_t>(0, len - cfg.window);
  for (int32_t n = cfg.max_n; n >= cfg.min_n; --n) {
    if (len < int64_t(n) + 1) continue;
    const auto suffix = tokens.subspan(size_t(len - n));
    // The latest start j < len - n whose n tokens equal the suffix: its continuation begins at
    // j + n, which is at most len - 1, so at least one token follows.
    for (int64_t j = len - n - 1; j >= lo; --j) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + j)) continue;
      const int64_t from = j + n, to = std::min(len, from + k);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

void NgramProposer::propose(std::span<DraftRequest> batch) {
  for (DraftRequest& r : batch) {
    r.draft = lookup(r.tokens, r.k, cfg_);
    r.q.clear();
  }
}

}  // namespace tessera

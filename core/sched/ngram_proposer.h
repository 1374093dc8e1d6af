// NgramProposer: prompt lookup decoding. The draft of a sequence is what followed the most recent
// earlier occurrence of its last n tokens (n from max_n down to min_n) in its own prompt and
// output. Needs no model and pays off on input-grounded tasks (rewriting, editing, extracting,
// code changes), where the output copies spans of the input. A one-hot proposer: q stays empty.
#pragma once
#include "core/sched/proposer.h"

namespace tessera {

struct NgramConfig {
  int32_t min_n = 2;
  int32_t max_n = 4;
  // Only the last |window| tokens are searched, so a step costs O(window * max_n) per sequence.
  int32_t window = 4096;
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(NgramConfig cfg = {}) : cfg_(cfg) {}
  void propose(std::span<DraftRequest> batch) override;
  const char* name() const override { return "ngram"; }

  // The draft for one sequence (what propose does per request).
  static std::vector<int32_t> lookup(std::span<const int32_t> tokens, int32_t k, const NgramConfig& cfg);

 private:
  NgramConfig cfg_;
};

}  // namespace tessera

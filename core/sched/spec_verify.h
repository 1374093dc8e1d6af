// Speculative verification: accepts a prefix of a draft by the rejection rule of Leviathan et al.
// (2023) and Chen et al. (2023), so the emitted tokens follow the target's distribution exactly,
// at any temperature. p is the target's distribution after the request's own penalties,
// temperature, top-k, top-p and min-p (Sampler::candidates); q is the draft's. Draft token x_i is
// accepted with probability min(1, p(x_i) / q(x_i)); at the first rejection the token is drawn
// from norm(max(0, p - q)) and the rest of the draft is dropped; when every draft token is
// accepted, a bonus token is drawn from the row after the draft. A one-hot q (n-gram) accepts x
// with probability p(x) and draws the replacement from p without x. Greedy (p one-hot at the
// argmax) accepts exactly the argmax, so its output equals non-speculative greedy decoding.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/sched/sampler.h"

namespace tessera {

struct VerifyResult {
  std::vector<int32_t> tokens;  // accepted draft tokens, then the replacement or bonus token
  int32_t accepted = 0;         // draft tokens accepted (tokens.size() - 1, or tokens.size() at a dead end)
  bool dead_end = false;        // the grammar allows nothing after the accepted draft
};

// |logits|: [draft.size() + 1, vocab], row i scoring the token after draft[0..i). |q|: empty
// (one-hot draft) or [draft.size(), vocab]. |history|: the sequence's tokens before the draft
// (the penalties of row i see it followed by draft[0..i)).
// |masks|: empty (no grammar) or one token bitmask per row (core/sched/grammar.h), row i the
// grammar's allowed set after draft[0..i): p_i is the masked distribution, so a draft token its
// row does not allow has p = 0 and is rejected; rows after it are never read (they may be null).
// A bonus row that allows nothing (the grammar dead-ends after the whole draft) emits no bonus
// token and sets |dead_end|.
VerifyResult verify_draft(Sampler& sampler, const float* logits, int32_t vocab, std::span<const int32_t> draft,
                          std::span<const float> q, const std::vector<int32_t>& history,
                          std::span<const uint32_t* const> masks = {});

}  // namespace tessera

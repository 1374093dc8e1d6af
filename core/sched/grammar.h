// Grammar: a per-sequence constraint on which token may come next (structured output: JSON,
// JSON Schema, EBNF, regex). The engine sees only this interface; grammar/ implements it with
// XGrammar, so core/ never includes a grammar library's headers.
//
// A Grammar object is the matcher state of one sequence. The engine calls, per sampled token:
// fill_mask (the allowed set), then accept (the sampled token). Single-threaded: one sequence's
// grammar is used by one thread at a time (the engine thread); fork() makes an independent copy.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace tessera {

// A token bitmask: bit (i % 32) of word (i / 32) set = token i allowed. [mask_words(vocab)].
inline int32_t mask_words(int32_t vocab) { return (vocab + 31) / 32; }
inline bool mask_allows(const uint32_t* mask, int32_t token) { return (mask[token >> 5] >> (token & 31)) & 1u; }

class Grammar {
 public:
  virtual ~Grammar() = default;
  // Writes the set of tokens allowed next into |mask| ([mask_words(vocab_size())] words; every
  // word written). End-of-generation tokens are allowed exactly when the grammar may end there.
  // Returns the number of allowed tokens: 0 means a dead end (no token can continue the text).
  virtual int32_t fill_mask(uint32_t* mask) = 0;
  // Advances by |token|. False, with the state unchanged, when the grammar does not allow it.
  virtual bool accept(int32_t token) = 0;
  // Undoes the last |n| accepted tokens (n <= tokens accepted; drafts that were rejected).
  virtual void rollback(int32_t n) = 0;
  // An independent matcher in the same state (the n > 1 choices of one request).
  virtual std::unique_ptr<Grammar> fork() const = 0;
  // An end-of-generation token was accepted: nothing more may follow.
  virtual bool terminated() const = 0;
  // The logits rows the mask covers (the model's vocabulary).
  virtual int32_t vocab_size() const = 0;
};

}  // namespace tessera

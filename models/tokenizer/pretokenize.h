// Pre-tokenizers: split text into the pieces BPE merges within, each a hand-written matcher
// for one of the regexes the Hugging Face / GGUF vocabularies name (no std::regex: too slow
// and it has no \p{L}). Pieces are views into the input; together they cover it exactly.
#pragma once
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera {

enum class PreTokenizer {
  kNone,    // the whole text is one piece (SentencePiece)
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
            //   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,   // as kLlama3 with \p{N} (one digit per piece)
  kSmolLM,  // each \p{N} isolated first, then kGpt2 on the rest (StarCoder-style)
};

// Maps a tokenizer.ggml.pre value ("smollm", "llama-bpe", ...) to its pre-tokenizer.
Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name);

// Appends the pieces of |text| to |pieces|.
void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace tessera

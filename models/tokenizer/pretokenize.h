// Pre-tokenizers: split text into the pieces BPE merges within. Each is a list of regexes
// applied in turn (pretokenize_table.cpp, by the tokenizer.ggml.pre names GGUF files store),
// run by the small regex engine in regex.h; the four most common lists also have a
// hand-written matcher that gives the same pieces faster. Pieces are views into the input;
// together they cover it exactly.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "models/tokenizer/regex.h"

namespace tessera {

enum class FastSplit {
  kNone,    // no hand-written matcher: run the regexes
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
            //   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,   // as kLlama3 with \p{N} (one digit per piece)
  kSmolLM,  // each \p{N} isolated first, then kGpt2 on the rest (StarCoder-style)
};

// One row of the table: the names that share a regex list.
struct PreTokenizerSpec {
  std::vector<std::string> names;
  FastSplit fast;
  bool ignore_merges;  // a piece that is a whole vocabulary entry is kept as one token (Llama 3)
  std::vector<std::string> regexes;
};
const std::vector<PreTokenizerSpec>& pre_tokenizer_specs();  // pretokenize_table.cpp

class PreTokenizer {
 public:
  PreTokenizer() = default;  // the whole text is one piece
  // From a tokenizer.ggml.pre name; an unknown name is Unimplemented, naming it.
  static Result<PreTokenizer> from_name(std::string_view name);
  // From a regex list (e.g. a tokenizer.json Split pattern); errors name the regex.
  static Result<PreTokenizer> from_regexes(std::string name, const std::vector<std::string>& regexes);

  // Appends the pieces of |text| to |pieces|.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  // The same through the regexes even where a hand-written matcher exists (for tests).
  void split_with_regexes(std::string_view text, std::vector<std::string_view>& pieces) const;

  const std::string& name() const { return name_; }
  bool ignore_merges() const { return ignore_merges_; }
  bool is_identity() const { return fast_ == FastSplit::kNone && regexes_.empty(); }

 private:
  std::string name_;
  FastSplit fast_ = FastSplit::kNone;
  bool ignore_merges_ = false;
  std::vector<Regex> regexes_;
};

// Kept for callers of the older API: PreTokenizer::from_name and PreTokenizer::split.
inline Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name) { return PreTokenizer::from_name(name); }
inline void pre_tokenize(const PreTokenizer& p, std::string_view text, std::vector<std::string_view>& pieces) {
  p.split(text, pieces);
}

}  // namespace tessera

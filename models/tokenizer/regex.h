// A small backtracking regex engine over Unicode code points, for the pre-tokenizer patterns that
// tokenizer.json files and llama.cpp's vocabularies name. It has the leftmost-first (Perl,
// Oniguruma, ECMAScript) semantics those patterns were written for, and supports what they use:
// literals, '.', classes [...] with ranges and negation, \p{..}/\P{..} general categories
// (L, Lu, Ll, Lt, Lm, Lo, M, N, Nd, P, S, Z, C, ... from unicode_tables.cpp), \s \S \d \D \w \W,
// groups ( ) (?: ) (?i: ), lookahead (?= ) (?! ), anchors ^ $ \b \B, alternation and the
// quantifiers * + ? {n} {n,} {n,m}, each greedy, lazy (?) or possessive (+).
// std::regex is not used: it has no \p{..} and is slow.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera {

class Regex {
 public:
  // Errors name the pattern, the offending construct and its code-point offset.
  static Result<Regex> compile(std::string_view pattern);

  // The length in code points of the highest-priority non-empty match that starts exactly at
  // |at|, matching within cps[begin, end) only (lookaheads and $ see |end| as the text's end);
  // 0 when there is none.
  size_t match_at(const uint32_t* cps, size_t begin, size_t end, size_t at) const;

  const std::string& pattern() const { return pattern_; }

  // Implementation types (regex.cpp).
  struct ClassItem {
    enum Type : uint8_t { kRange, kCategory, kMajor, kSpace, kDigit, kWord, kAny } type;
    bool negated;
    uint32_t lo, hi;  // kRange: [lo, hi]; kCategory: a UnicodeCategory; kMajor: 'L', 'N', ...
  };
  enum class Kind : uint8_t { kSet, kSeq, kAlt, kRepeat, kLook, kBegin, kEnd, kWordBoundary };
  struct Node {
    Kind kind;
    std::vector<int> kids;          // kSeq, kAlt: the parts; kRepeat, kLook: the one child
    std::vector<ClassItem> items;   // kSet
    bool negated = false;           // kSet: [^...]; kLook: (?!...); kWordBoundary: \B
    bool icase = false;             // kSet: ASCII case-insensitive
    int min = 1, max = 1;           // kRepeat; max -1 = unbounded
    enum class Mode : uint8_t { kGreedy, kLazy, kPossessive } mode = Mode::kGreedy;
  };

 private:
  friend class RegexParser;
  friend class RegexMatcher;
  std::string pattern_;
  std::vector<Node> nodes_;
  int root_ = -1;
};

// Splits each fragment of |lengths| (code-point lengths of consecutive fragments of |cps|, which
// they cover) into the matches of |re| and the stretches between them, as llama.cpp's
// unicode_regex_split does with each regex of a list in turn.
void regex_split(const Regex& re, const std::vector<uint32_t>& cps, std::vector<size_t>& lengths);

}  // namespace tessera

#include "models/tokenizer/pretokenize.h"

#include <cstdint>
#include <string>

#include "models/tokenizer/unicode.h"

namespace tessera {
namespace {

// The text as code points; matchers return the code-point length of the match at |i|
// (0 = no match), mirroring the regex alternatives in order.
struct Cps {
  std::vector<uint32_t> cp;
  std::vector<size_t> off;
  size_t n() const { return cp.size(); }
  bool ws(size_t i) const { return i < n() && is_whitespace(cp[i]); }
  bool letter(size_t i) const { return i < n() && is_letter(cp[i]); }
  bool number(size_t i) const { return i < n() && is_number(cp[i]); }
  bool newline(size_t i) const { return i < n() && (cp[i] == '\r' || cp[i] == '\n'); }
  // [^\s\p{L}\p{N}]
  bool other(size_t i) const { return i < n() && !ws(i) && !letter(i) && !number(i); }
  uint32_t lower(size_t i) const {
    return i < n() && cp[i] >= 'A' && cp[i] <= 'Z' ? cp[i] + 32 : (i < n() ? cp[i] : 0);
  }
};

// 's|'t|'re|'ve|'m|'ll|'d, optionally ignoring ASCII case.
size_t match_contraction(const Cps& c, size_t i, bool ignore_case) {
  if (c.cp[i] != '\'') return 0;
  auto at = [&](size_t k) { return ignore_case ? c.lower(k) : (k < c.n() ? c.cp[k] : 0); };
  const uint32_t a = at(i + 1), b = at(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace run [i, k): leave the last space for the next word.
size_t match_spaces(const Cps& c, size_t i) {
  size_t k = i;
  while (c.ws(k)) ++k;
  if (k == c.n() || k - i < 2) return k - i;
  return k - 1 - i;
}

size_t run_while(const Cps& c, size_t j, bool (Cps::*pred)(size_t) const) {
  size_t k = j;
  while ((c.*pred)(k)) ++k;
  return k - j;
}

size_t match_gpt2(const Cps& c, size_t i) {
  if (size_t m = match_contraction(c, i, false)) return m;
  const size_t j = c.cp[i] == ' ' ? i + 1 : i;  // the optional leading space
  if (size_t m = run_while(c, j, &Cps::letter)) return j - i + m;
  if (size_t m = run_while(c, j, &Cps::number)) return j - i + m;
  if (size_t m = run_while(c, j, &Cps::other)) return j - i + m;
  return match_spaces(c, i);
}

size_t match_llama3(const Cps& c, size_t i, size_t max_digits) {
  if (size_t m = match_contraction(c, i, true)) return m;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.letter(i)) return run_while(c, i, &Cps::letter);
  if (!c.newline(i) && !c.number(i) && c.letter(i + 1)) return 1 + run_while(c, i + 1, &Cps::letter);
  if (c.number(i)) {
    size_t m = 1;
    while (m < max_digits && c.number(i + m)) ++m;
    return m;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const size_t j = c.cp[i] == ' ' ? i + 1 : i;
  if (size_t m = run_while(c, j, &Cps::other)) {
    const size_t k = j + m;
    return k - i + run_while(c, k, &Cps::newline);
  }
  // \s*[\r\n]+ : up to and including the last newline of the whitespace run.
  size_t k = i, last_newline = SIZE_MAX;
  while (c.ws(k)) {
    if (c.newline(k)) last_newline = k;
    ++k;
  }
  if (last_newline != SIZE_MAX) return last_newline + 1 - i;
  return match_spaces(c, i);
}

// Splits all of |text| with one regex-style pattern.
void split_with(std::string_view text, PreTokenizer kind, std::vector<std::string_view>& pieces) {
  Cps c;
  utf8_split(text, c.cp, c.off);
  size_t i = 0;
  while (i < c.n()) {
    size_t m = 0;
    switch (kind) {
      case PreTokenizer::kLlama3: m = match_llama3(c, i, 3); break;
      case PreTokenizer::kQwen2: m = match_llama3(c, i, 1); break;
      default: m = match_gpt2(c, i); break;
    }
    if (m == 0) m = 1;  // the alternatives cover every code point; this only guards a bug
    pieces.push_back(text.substr(c.off[i], c.off[i + m] - c.off[i]));
    i += m;
  }
}

}  // namespace

Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  if (name == "gpt2" || name == "default" || name == "gpt-2") return PreTokenizer::kGpt2;
  if (name == "smollm" || name == "starcoder" || name == "refact") return PreTokenizer::kSmolLM;
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3" || name == "dbrx" ||
      name == "smaug-bpe" || name == "falcon3")
    return PreTokenizer::kLlama3;
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::kQwen2;
  return Unimplemented("tokenizer: unsupported pre-tokenizer '" + std::string(name) +
                       "' (supported: gpt2, default, smollm, starcoder, llama-bpe, llama3, qwen2)");
}

void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces) {
  if (text.empty()) return;
  if (kind == PreTokenizer::kNone) {
    pieces.push_back(text);
    return;
  }
  if (kind != PreTokenizer::kSmolLM) {
    split_with(text, kind, pieces);
    return;
  }
  // Isolate every \p{N}, then run the GPT-2 pattern on each stretch between them as a text
  // of its own (so "a  1" ends its stretch with "  ", as the Hugging Face Digits step does).
  size_t start = 0, pos = 0;
  while (pos < text.size()) {
    const size_t at = pos;
    if (!is_number(utf8_next(text, pos))) continue;
    if (at > start) split_with(text.substr(start, at - start), PreTokenizer::kGpt2, pieces);
    pieces.push_back(text.substr(at, pos - at));
    start = pos;
  }
  if (start < text.size()) split_with(text.substr(start), PreTokenizer::kGpt2, pieces);
}

}  // namespace tessera

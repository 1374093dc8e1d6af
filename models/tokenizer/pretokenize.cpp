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

// Splits all of |text| with one hand-written pattern.
void split_with(std::string_view text, FastSplit kind, std::vector<std::string_view>& pieces) {
  Cps c;
  utf8_split(text, c.cp, c.off);
  size_t i = 0;
  while (i < c.n()) {
    size_t m = 0;
    switch (kind) {
      case FastSplit::kLlama3: m = match_llama3(c, i, 3); break;
      case FastSplit::kQwen2: m = match_llama3(c, i, 1); break;
      default: m = match_gpt2(c, i); break;
    }
    if (m == 0) m = 1;  // the alternatives cover every code point; this only guards a bug
    pieces.push_back(text.substr(c.off[i], c.off[i + m] - c.off[i]));
    i += m;
  }
}

void split_fast(FastSplit kind, std::string_view text, std::vector<std::string_view>& pieces) {
  if (kind != FastSplit::kSmolLM) {
    split_with(text, kind, pieces);
    return;
  }
  // Isolate every \p{N}, then run the GPT-2 pattern on each stretch between them as a text
  // of its own (so "a  1" ends its stretch with "  ", as the Hugging Face Digits step does).
  size_t start = 0, pos = 0;
  while (pos < text.size()) {
    const size_t at = pos;
    if (!is_number(utf8_next(text, pos))) continue;
    if (at > start) split_with(text.substr(start, at - start), FastSplit::kGpt2, pieces);
    pieces.push_back(text.substr(at, pos - at));
    start = pos;
  }
  if (start < text.size()) split_with(text.substr(start), FastSplit::kGpt2, pieces);
}

}  // namespace

Result<PreTokenizer> PreTokenizer::from_regexes(std::string name, const std::vector<std::string>& regexes) {
  PreTokenizer p;
  p.name_ = std::move(name);
  for (const std::string& r : regexes) {
    auto re = Regex::compile(r);
    if (!re.ok()) return re.status().with_context("pre-tokenizer '" + p.name_ + "': ");
    p.regexes_.push_back(std::move(re).value());
  }
  return p;
}

Result<PreTokenizer> PreTokenizer::from_name(std::string_view name) {
  for (const PreTokenizerSpec& s : pre_tokenizer_specs()) {
    for (const std::string& n : s.names) {
      if (n != name) continue;
      TS_ASSIGN_OR_RETURN(PreTokenizer p, from_regexes(std::string(name), s.regexes));
      p.fast_ = s.fast;
      p.ignore_merges_ = s.ignore_merges;
      return p;
    }
  }
  // Names older Tessera GGUF writers and tokenizer.json conversion use.
  if (name == "gpt2") return from_name("gpt-2");
  std::string known;
  for (const PreTokenizerSpec& s : pre_tokenizer_specs()) known += (known.empty() ? "" : ", ") + s.names[0];
  return Unimplemented("tokenizer: unknown pre-tokenizer '" + std::string(name) + "' (tokenizer.ggml.pre; known: " +
                       known + ", and the names sharing their rules)");
}

void PreTokenizer::split_with_regexes(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  if (regexes_.empty()) {
    pieces.push_back(text);
    return;
  }
  std::vector<uint32_t> cps;
  std::vector<size_t> off;
  utf8_split(text, cps, off);
  std::vector<size_t> lengths = {cps.size()};
  for (const Regex& re : regexes_) regex_split(re, cps, lengths);
  size_t at = 0;
  for (size_t len : lengths) {
    pieces.push_back(text.substr(off[at], off[at + len] - off[at]));
    at += len;
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  if (fast_ != FastSplit::kNone) split_fast(fast_, text, pieces);
  else split_with_regexes(text, pieces);
}

}  // namespace tessera

// WordPiece (BERT): BERT's basic normaliser (NFD, accents stripped, lower case, control
// characters dropped), then words split at whitespace, with each punctuation mark, ASCII symbol
// and CJK ideograph a word of its own; each word, prefixed with "▁" (the GGUF spelling of a word
// start, for BERT's "##" on the pieces that continue one), is cut greedily into the longest
// vocabulary entries from the left. A word with any part that no entry covers becomes unk.
#include <algorithm>

#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode.h"

namespace tessera {
namespace {

// The CJK ranges BERT's tokenizer isolates (as Hugging Face's tokenizers crate lists them).
bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// The normalised words of |text|.
std::vector<std::string> wordpiece_words(std::string_view text) {
  std::vector<uint32_t> cps;
  for (size_t pos = 0; pos < text.size();) nfd_append(utf8_next(text, pos), cps);
  std::vector<std::string> words(1);
  auto finish = [&words] {
    if (!words.back().empty()) words.emplace_back();
  };
  for (uint32_t cp : cps) {
    if (is_whitespace(cp)) {
      finish();
      continue;
    }
    const char cls = unicode_major_class(cp);
    // Controls go; of the marks only the nonspacing ones (Mn, the accents NFD splits off), as HF
    // tokenizers' BertNormalizer strips them: spacing marks (Mc, e.g. Devanagari and Tamil vowel
    // signs) and enclosing ones (Me) stay part of their word.
    if (cp == 0 || cp == kReplacementChar || cls == 'C' || unicode_category(cp) == UnicodeCategory::kMn) continue;
    const bool alone = cls == 'P' || (cp < 0x7F && cls == 'S') || is_cjk(cp);
    if (alone) finish();
    utf8_append(words.back(), to_lower(cp));
    if (alone) finish();
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void Tokenizer::encode_wpm(std::string_view text, std::vector<int32_t>& out) const {
  for (const std::string& w : wordpiece_words(text)) {
    const std::string word = "\xE2\x96\x81" + w;
    const size_t first = out.size();
    for (size_t i = 0; i < word.size();) {
      size_t j = std::min(word.size(), i + max_token_len_);
      for (; j > i; --j) {
        auto it = vocab_.find(word.substr(i, j - i));
        if (it != vocab_.end()) {
          out.push_back(it->second);
          break;
        }
      }
      if (j == i) {  // no entry starts here: the whole word is unknown
        out.resize(first);
        break;
      }
      i = j;
    }
    if (out.size() == first && data_.unk >= 0) out.push_back(data_.unk);
  }
}

}  // namespace tessera

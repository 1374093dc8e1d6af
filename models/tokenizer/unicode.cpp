#include "models/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace tessera {

size_t utf8_valid_len(std::string_view text, size_t pos) {
  const auto b0 = static_cast<uint8_t>(text[pos]);
  size_t len = 0;
  uint32_t min_cp = 0;
  if (b0 < 0x80) return 1;
  if ((b0 & 0xE0) == 0xC0) { len = 2; min_cp = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; min_cp = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; min_cp = 0x10000; }
  else return 0;
  if (pos + len > text.size()) return 0;
  uint32_t cp = b0 & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(text[pos + i]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and code points past U+10FFFF are not valid UTF-8.
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

uint32_t utf8_next(std::string_view text, size_t& pos) {
  const size_t len = utf8_valid_len(text, pos);
  if (len == 0) {
    ++pos;
    return kReplacementChar;
  }
  const auto b0 = static_cast<uint8_t>(text[pos]);
  uint32_t cp = len == 1 ? b0 : (b0 & (0x7Fu >> len));
  for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + i]) & 0x3F);
  pos += len;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void utf8_split(std::string_view text, std::vector<uint32_t>& cps, std::vector<size_t>& offsets) {
  cps.clear();
  offsets.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    offsets.push_back(pos);
    cps.push_back(utf8_next(text, pos));
  }
  offsets.push_back(text.size());
}

namespace {

bool in_ranges(const CodepointRange* ranges, size_t n, uint32_t cp) {
  const CodepointRange* end = ranges + n;
  const CodepointRange* it = std::upper_bound(
      ranges, end, cp, [](uint32_t v, const CodepointRange& r) { return v < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

// GPT-2's table: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order, so every byte has a visible, non-space stand-in.
struct ByteTable {
  std::array<uint32_t, 256> to_cp{};
  ByteTable() {
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? b : next++;
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

}  // namespace

UnicodeCategory unicode_category(uint32_t cp) {
  using unicode_tables::kCategories;
  const CategoryRange* end = kCategories + unicode_tables::kCategories_size;
  const CategoryRange* it = std::upper_bound(
      kCategories, end, cp, [](uint32_t v, const CategoryRange& r) { return v < r.first; });
  if (it == kCategories || cp > (it - 1)->last) return UnicodeCategory::kCn;
  return static_cast<UnicodeCategory>((it - 1)->category);
}

char unicode_major_class(uint32_t cp) {
  using C = UnicodeCategory;
  const C c = unicode_category(cp);
  if (c >= C::kLu && c <= C::kLo) return 'L';
  if (c >= C::kMn && c <= C::kMe) return 'M';
  if (c >= C::kNd && c <= C::kNo) return 'N';
  if (c >= C::kPc && c <= C::kPo) return 'P';
  if (c >= C::kSm && c <= C::kSo) return 'S';
  if (c >= C::kZs && c <= C::kZp) return 'Z';
  return 'C';
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return unicode_major_class(cp) == 'L';
}
bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return unicode_major_class(cp) == 'N';
}
bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return in_ranges(unicode_tables::kWhiteSpace, unicode_tables::kWhiteSpace_size, cp);
}

void nfd_append(uint32_t cp, std::vector<uint32_t>& out) {
  // Hangul syllables decompose arithmetically into two or three jamo (Unicode 3.12).
  constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
  constexpr uint32_t kVCount = 21, kTCount = 28, kSCount = 11172;
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / (kVCount * kTCount));
    out.push_back(kVBase + (s % (kVCount * kTCount)) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  using unicode_tables::kNfd;
  const Decomposition* end = kNfd + unicode_tables::kNfd_size;
  const Decomposition* it =
      std::lower_bound(kNfd, end, cp, [](const Decomposition& d, uint32_t v) { return d.cp < v; });
  if (it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  for (uint32_t x : it->to) {
    if (x != 0) out.push_back(x);
  }
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  using unicode_tables::kLower;
  const CodepointPair* end = kLower + unicode_tables::kLower_size;
  const CodepointPair* it =
      std::lower_bound(kLower, end, cp, [](const CodepointPair& p, uint32_t v) { return p.from < v; });
  return it != end && it->from == cp ? it->to : cp;
}

uint32_t byte_to_codepoint(uint8_t b) { return byte_table().to_cp[b]; }

int codepoint_to_byte(uint32_t cp) {
  if (cp < 0x100) {
    const bool printable = (cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || cp >= 0xAE;
    return printable ? static_cast<int>(cp) : -1;
  }
  if (cp < 0x100 + 68) {
    const auto& t = byte_table().to_cp;
    for (int b = 0; b < 256; ++b) {
      if (t[static_cast<size_t>(b)] == cp) return b;
    }
  }
  return -1;
}

}  // namespace tessera

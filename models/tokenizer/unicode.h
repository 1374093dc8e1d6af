// UTF-8 decoding/encoding, the Unicode classes the pre-tokenizer patterns use, and GPT-2's
// byte <-> printable-code-point mapping for byte-level BPE vocabularies.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

struct CodepointRange {
  uint32_t first, last;  // inclusive
};

namespace unicode_tables {
extern const CodepointRange kLetter[];
extern const size_t kLetter_size;
extern const CodepointRange kNumber[];
extern const size_t kNumber_size;
extern const CodepointRange kWhiteSpace[];
extern const size_t kWhiteSpace_size;
}  // namespace unicode_tables

constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence starting at text[pos] if it is well formed, else 0.
size_t utf8_valid_len(std::string_view text, size_t pos);
// Decodes the character at |pos| and advances |pos|. A malformed byte decodes to
// U+FFFD and advances by one, so every byte of the input is consumed exactly once.
uint32_t utf8_next(std::string_view text, size_t& pos);
void utf8_append(std::string& out, uint32_t cp);
// Code points of |text| plus the byte offset each starts at (offsets has one extra entry:
// the text's length), so matchers work on code points and still slice the original bytes.
void utf8_split(std::string_view text, std::vector<uint32_t>& cps, std::vector<size_t>& offsets);

bool is_letter(uint32_t cp);      // \p{L}
bool is_number(uint32_t cp);      // \p{N}
bool is_whitespace(uint32_t cp);  // \s (White_Space)

// GPT-2's byte-level alphabet: each byte maps to a printable code point ("Ġ" for ' ').
uint32_t byte_to_codepoint(uint8_t b);
// The byte a code point stands for, or -1 if it is not in the alphabet.
int codepoint_to_byte(uint32_t cp);

}  // namespace tessera

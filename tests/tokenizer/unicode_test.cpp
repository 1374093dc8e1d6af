#include <gtest/gtest.h>

#include "models/tokenizer/unicode.h"

namespace tessera {
namespace {

TEST(Unicode, Categories) {
  EXPECT_TRUE(is_letter('a'));
  EXPECT_TRUE(is_letter(0x00E9));   // é
  EXPECT_TRUE(is_letter(0x65E5));   // 日
  EXPECT_TRUE(is_letter(0x0416));   // Ж
  EXPECT_FALSE(is_letter('1'));
  EXPECT_FALSE(is_letter(0x1F917));  // 🤗
  EXPECT_TRUE(is_number('7'));
  EXPECT_TRUE(is_number(0x0663));   // Arabic-Indic 3
  EXPECT_TRUE(is_number(0x00B2));   // superscript 2 (No)
  EXPECT_TRUE(is_number(0x2167));   // Roman numeral 8 (Nl)
  EXPECT_FALSE(is_number('x'));
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_TRUE(is_whitespace(0x00A0));
  EXPECT_TRUE(is_whitespace('\n'));
  EXPECT_FALSE(is_whitespace(0x200B));  // zero-width space is not White_Space
}

TEST(Unicode, Utf8) {
  std::string s;
  for (uint32_t cp : {0x41u, 0xE9u, 0x65E5u, 0x1F917u}) utf8_append(s, cp);
  EXPECT_EQ(s, "A\xC3\xA9\xE6\x97\xA5\xF0\x9F\xA4\x97");
  size_t pos = 0;
  EXPECT_EQ(utf8_next(s, pos), 0x41u);
  EXPECT_EQ(utf8_next(s, pos), 0xE9u);
  EXPECT_EQ(utf8_next(s, pos), 0x65E5u);
  EXPECT_EQ(utf8_next(s, pos), 0x1F917u);
  EXPECT_EQ(pos, s.size());
  // Malformed: a lone continuation byte, an overlong '/', a surrogate, a truncated emoji.
  for (std::string bad : {"\x80", "\xC0\xAF", "\xED\xA0\x80", "\xF0\x9F\xA4"}) {
    EXPECT_EQ(utf8_valid_len(bad, 0), 0u) << bad.size();
    pos = 0;
    EXPECT_EQ(utf8_next(bad, pos), kReplacementChar);
    EXPECT_EQ(pos, 1u);
  }
}

TEST(Unicode, ByteAlphabet) {
  EXPECT_EQ(byte_to_codepoint(' '), 0x120u);  // "Ġ"
  EXPECT_EQ(byte_to_codepoint('\n'), 0x10Au);  // "Ċ"
  EXPECT_EQ(byte_to_codepoint('a'), static_cast<uint32_t>('a'));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(codepoint_to_byte(byte_to_codepoint(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(codepoint_to_byte(0x20), -1);
  EXPECT_EQ(codepoint_to_byte(0x4E00), -1);
}

}  // namespace
}  // namespace tessera

// SentencePiece BPE: hand-computed segmentations on a tiny vocabulary, and a model trained
// with the `sentencepiece` package (tests/data/spm_golden.txt, from gen_spm_golden.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "models/tokenizer/tokenizer.h"
#include "tests/tokenizer/golden.h"

namespace tessera {
namespace {

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then |pieces| from id 259.
TokenizerData tiny_spm(const std::vector<std::pair<std::string, float>>& pieces) {
  TokenizerData d;
  d.model = "llama";
  d.tokens = {"<unk>", "<s>", "</s>"};
  d.token_types = {kTokenUnknown, kTokenControl, kTokenControl};
  d.scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    d.tokens.push_back(name);
    d.token_types.push_back(kTokenByte);
    d.scores.push_back(0);
  }
  for (const auto& [p, s] : pieces) {
    d.tokens.push_back(p);
    d.token_types.push_back(kTokenNormal);
    d.scores.push_back(s);
  }
  d.unk = 0;
  d.bos = 1;
  d.eos = 2;
  d.add_bos = true;
  d.add_space_prefix = true;
  return d;
}

const std::vector<std::pair<std::string, float>> kHello = {
    {"\xE2\x96\x81", -1},  {"h", -2},  {"e", -3},   {"l", -4},   {"o", -5},
    {"\xE2\x96\x81h", -6}, {"ll", -7}, {"\xE2\x96\x81he", -8},  {"llo", -9},
    {"\xE2\x96\x81hello", -10}, {"he", -0.5f}, {"w", -11}};
// ids:  ▁ 259, h 260, e 261, l 262, o 263, ▁h 264, ll 265, ▁he 266, llo 267, ▁hello 268,
//       he 269, w 270

TEST(SpmTokenizer, HandComputedSegmentation) {
  auto tok = Tokenizer::create(tiny_spm(kHello));
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const Tokenizer& t = **tok;
  // ▁hello: he(-0.5) -> ll(-7) -> ▁he(-8) -> llo(-9) -> ▁hello(-10).
  EXPECT_EQ(ids_str(t.encode("hello", false, false)), "268 ");
  EXPECT_EQ(ids_str(t.encode("hello", true, false)), "1 268 ");
  // "é" is not in the vocabulary: its two UTF-8 bytes fall back to <0xC3> <0xA9>.
  EXPECT_EQ(ids_str(t.encode("h\xC3\xA9", false, false)), "264 198 172 ");
  // Spaces become ▁; "w" then "o" stay apart (no "wo" entry): ▁hello ▁ w o.
  EXPECT_EQ(ids_str(t.encode("hello wo", false, false)), "268 259 270 263 ");
  EXPECT_EQ(t.decode(t.encode("hello wo", true, false)), "<s>hello wo");
  EXPECT_EQ(t.decode(t.encode(" hello  h\xC3\xA9", true, false), true), " hello  h\xC3\xA9");
  EXPECT_EQ(t.token_to_piece(268), " hello");
  EXPECT_EQ(t.token_to_piece(198), "\xC3");
  // A special token written in the text is its id only with parse_special.
  EXPECT_EQ(ids_str(t.encode("</s>", false, true)), "2 ");
  EXPECT_NE(ids_str(t.encode("</s>", false, false)), "2 ");
  // Text after a special token gets the "▁" prefix again (llama.cpp, HF legacy Llama).
  EXPECT_EQ(ids_str(t.encode("hello</s>hello", false, true)), "268 2 268 ");
  EXPECT_TRUE(t.is_eog(2));
}

// End of generation: the chat models' turn ends count beside the metadata's eos; in a harmony
// vocabulary (gpt-oss: <|return|> and <|call|> present) <|end|> closes one message of a reply that
// goes on, so it does not end generation.
TEST(SpmTokenizer, TurnEndsAndHarmonysMessageEnd) {
  auto with = [](std::vector<std::string> names) {
    TokenizerData d = tiny_spm(kHello);
    for (const std::string& n : names) {
      d.tokens.push_back(n);
      d.token_types.push_back(kTokenControl);
      d.scores.push_back(0);
    }
    auto tok = Tokenizer::create(d);
    EXPECT_TRUE(tok.ok()) << tok.status().to_string();
    return std::move(tok).value();
  };
  const int32_t first = int32_t(tiny_spm(kHello).tokens.size());
  const auto phi = with({"<|end|>", "<|user|>"});
  EXPECT_TRUE(phi->is_eog(first)) << "<|end|> ends a Phi-3 turn";
  EXPECT_FALSE(phi->is_eog(first + 1));
  const auto harmony = with({"<|end|>", "<|return|>", "<|call|>", "<|start|>"});
  EXPECT_FALSE(harmony->is_eog(first)) << "<|end|> only closes a harmony message";
  EXPECT_TRUE(harmony->is_eog(first + 1));
  EXPECT_TRUE(harmony->is_eog(first + 2));
  EXPECT_FALSE(harmony->is_eog(first + 3));
  EXPECT_TRUE(harmony->is_eog(2)) << "the metadata's eos";
}

TEST(SpmTokenizer, ScoresDecideMergeOrder) {
  // "abc": the better-scoring pair merges first and blocks the other.
  auto ab_first = Tokenizer::create(tiny_spm({{"a", -5}, {"b", -5}, {"c", -5}, {"ab", -1}, {"bc", -2}}));
  auto bc_first = Tokenizer::create(tiny_spm({{"a", -5}, {"b", -5}, {"c", -5}, {"ab", -2}, {"bc", -1}}));
  ASSERT_TRUE(ab_first.ok() && bc_first.ok());
  // No "▁": the prefix falls back to its three UTF-8 bytes E2 96 81 (ids 229 153 132).
  EXPECT_EQ(ids_str((*ab_first)->encode("abc", false, false)), "229 153 132 262 261 ");
  EXPECT_EQ(ids_str((*bc_first)->encode("abc", false, false)), "229 153 132 259 263 ");
}

TEST(SpmTokenizer, StreamDecoderDropsPrefixSpace) {
  auto tok = Tokenizer::create(tiny_spm(kHello));
  ASSERT_TRUE(tok.ok());
  StreamDecoder stream(**tok, /*skip_special=*/true);
  std::string out;
  for (int32_t id : (*tok)->encode("hello h\xC3\xA9", true, false)) out += stream.push(id);
  out += stream.flush();
  EXPECT_EQ(out, "hello h\xC3\xA9");
}

TEST(SpmTokenizer, RoundTripsRandomBytes) {
  auto tok = Tokenizer::create(tiny_spm(kHello));
  ASSERT_TRUE(tok.ok());
  std::mt19937 rng(11);
  const char alphabet[] = {'h', 'e', 'l', 'o', ' ', 'w', 'x', '\n', '\xC3', '\xA9', '\xFF', '\0'};
  for (int iter = 0; iter < 300; ++iter) {
    std::string s(std::uniform_int_distribution<size_t>(0, 24)(rng), ' ');
    for (char& c : s) c = alphabet[std::uniform_int_distribution<size_t>(0, sizeof(alphabet) - 1)(rng)];
    const auto ids = (*tok)->encode(s, true, false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);  // add_bos
    EXPECT_EQ((*tok)->decode(ids, /*skip_special=*/true), s) << "iteration " << iter;
  }
}

TEST(SpmTokenizer, RejectsMissingScores) {
  TokenizerData d = tiny_spm(kHello);
  d.scores.pop_back();
  auto r = Tokenizer::create(d);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("score"), std::string::npos) << r.status().message();
}

TEST(SpmTokenizer, MatchesSentencePiece) {
  const auto records = testing::read_golden(testing::test_data_path("spm_golden.txt"));
  TokenizerData d;
  d.model = "llama";
  d.unk = 0;
  d.bos = 1;
  d.eos = 2;
  d.add_space_prefix = true;
  for (const auto& r : records) {
    if (r.tag != "V") continue;
    d.tokens.push_back(r.text);
    d.token_types.push_back(std::stoi(r.arg));
    d.scores.push_back(std::stof(r.fields.at(0)));
  }
  ASSERT_GT(d.tokens.size(), 400u);
  auto tok = Tokenizer::create(d);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  int checked = 0;
  for (const auto& r : records) {
    if (r.tag != "E") continue;
    std::vector<int32_t> want;
    for (const auto& f : r.fields) want.push_back(std::stoi(f));
    const auto got = (*tok)->encode(r.text, false, false);
    EXPECT_EQ(ids_str(got), ids_str(want)) << "text: '" << r.text << "'";
    EXPECT_EQ((*tok)->decode(got), r.text);
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace tessera

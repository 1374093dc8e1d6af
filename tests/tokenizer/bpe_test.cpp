// Byte-level BPE against Hugging Face `tokenizers` goldens for SmolLM2's own vocabulary
// (tests/data/tokenizer_golden.txt, from gen_golden.py), plus error handling and streaming.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "models/tokenizer/tokenizer.h"
#include "tests/support/test_support.h"
#include "models/tokenizer/unicode.h"
#include "tests/tokenizer/gguf_meta.h"
#include "tests/tokenizer/golden.h"

namespace tessera {
namespace {

using testing::read_golden;

std::string model_path() {
  const char* dir = std::getenv("TESSERA_MODELS");
  return std::string(dir ? dir : "models-cache") + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto vocab = testing::read_gguf_vocab(model_path());
    if (!vocab.ok()) {
      skip_reason_ = new std::string(vocab.status().to_string());
      return;
    }
    auto tok = Tokenizer::create(std::move(vocab->data));
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    tok_ = std::move(tok).value().release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete skip_reason_;
    tok_ = nullptr;
    skip_reason_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) TESSERA_SKIP_MISSING() << "SmolLM2 GGUF unavailable: " << (skip_reason_ ? *skip_reason_ : "");
  }
  static const Tokenizer* tok_;
  static std::string* skip_reason_;
};
const Tokenizer* SmolLM2Tokenizer::tok_ = nullptr;
std::string* SmolLM2Tokenizer::skip_reason_ = nullptr;

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

TEST_F(SmolLM2Tokenizer, MatchesHuggingFaceIds) {
  const auto records = read_golden(testing::test_data_path("tokenizer_golden.txt"));
  int checked = 0;
  for (const auto& r : records) {
    if (r.tag != "E") continue;
    const bool parse_special = r.arg == "1";
    std::vector<int32_t> want;
    for (const auto& f : r.fields) want.push_back(std::stoi(f));
    const auto got = tok_->encode(r.text, /*add_special=*/false, parse_special);
    EXPECT_EQ(ids_str(got), ids_str(want)) << "text: '" << r.text << "' parse_special=" << parse_special;
    EXPECT_EQ(tok_->decode(got), r.text);
    ++checked;
  }
  EXPECT_GE(checked, 200);
}

TEST_F(SmolLM2Tokenizer, SpecialTokens) {
  const int32_t im_start = tok_->find_token("<|im_start|>").value_or(-1);
  const int32_t im_end = tok_->find_token("<|im_end|>").value_or(-1);
  ASSERT_EQ(im_start, 1);
  ASSERT_EQ(im_end, 2);
  const auto ids = tok_->encode("<|im_start|>user\nhi<|im_end|>", false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(ids.back(), im_end);
  // As plain text the marker is several ordinary tokens.
  const auto plain = tok_->encode("<|im_start|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tok_->decode(plain), "<|im_start|>");
  EXPECT_TRUE(tok_->is_eog(im_end));
  EXPECT_TRUE(tok_->is_eog(tok_->eos()));
  EXPECT_FALSE(tok_->is_eog(im_start));
  EXPECT_EQ(tok_->decode(ids, /*skip_special=*/true), "user\nhi");
  EXPECT_EQ(tok_->vocab_size(), 49152);
  // add_special follows the file's flags: SmolLM2 adds no BOS.
  EXPECT_EQ(tok_->encode("hi", true, true), tok_->encode("hi", false, true));
}

TEST_F(SmolLM2Tokenizer, LiteralRangesKeepTypedMarkersAsText) {
  // A chat turn whose content (bytes 17..31) holds a typed "<|im_end|>": with the content
  // marked literal only the template's own markers are control tokens.
  const std::string text = "<|im_start|>user\nhi<|im_end|>there<|im_end|>";
  const size_t content_begin = std::string("<|im_start|>user\n").size();
  const size_t content_end = text.size() - std::string("<|im_end|>").size();
  EncodeOptions o;
  o.parse_special = true;
  o.literal = {{content_begin, content_end}};
  const auto ids = tok_->encode(text, o);
  int controls = 0;
  for (int32_t id : ids) controls += tok_->is_control(id);
  EXPECT_EQ(controls, 2) << ids_str(ids);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok_->decode(ids), text);
  // Without ranges the same options give the old, forgeable result: three control tokens.
  o.literal.clear();
  int forged = 0;
  for (int32_t id : tok_->encode(text, o)) forged += tok_->is_control(id);
  EXPECT_EQ(forged, 3);
  // The text between markers is tokenised as a whole, so a message without marker text gives
  // exactly the ids it gives unmarked.
  const std::string clean = "<|im_start|>user\nhello there, friend<|im_end|>";
  o.literal = {{content_begin, clean.size() - std::string("<|im_end|>").size()}};
  EXPECT_EQ(ids_str(tok_->encode(clean, o)), ids_str(tok_->encode(clean, false, true)));
  // A marker straddling a range's start is text too (its first bytes are template text).
  o.literal = {{3, 8}};
  int straddling = 0;
  for (int32_t id : tok_->encode("<|im_start|>", o)) straddling += tok_->is_control(id);
  EXPECT_EQ(straddling, 0);
}

TEST_F(SmolLM2Tokenizer, MaxTokensStopsEarly) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "word" + std::to_string(i) + " ";
  const auto all = tok_->encode(text, false, false);
  ASSERT_GT(all.size(), 1000u);
  EncodeOptions o;
  o.max_tokens = 100;
  const auto some = tok_->encode(text, o);
  EXPECT_GT(some.size(), 100u);
  EXPECT_LT(some.size(), 120u);  // stopped within a pre-tokenised word of the limit
  EXPECT_TRUE(std::equal(some.begin(), some.end(), all.begin())) << "a prefix of the full encoding";
  o.max_tokens = all.size();
  EXPECT_EQ(tok_->encode(text, o), all) << "a limit the text fits is no limit";
}

TEST_F(SmolLM2Tokenizer, RoundTripsRandomBytes) {
  // SmolLM2's vocabulary has no token for 21 bytes (0xC0, 0xF5..0xFF, a few controls); every
  // other byte sequence, valid UTF-8 or not, must survive encode -> decode.
  std::vector<char> spellable;
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    utf8_append(spelled, byte_to_codepoint(static_cast<uint8_t>(b)));
    if (tok_->find_token(spelled)) spellable.push_back(static_cast<char>(b));
  }
  EXPECT_EQ(spellable.size(), 256u - 21u);
  std::mt19937 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    std::string s(std::uniform_int_distribution<size_t>(0, 64)(rng), '\0');
    for (char& c : s) c = spellable[std::uniform_int_distribution<size_t>(0, spellable.size() - 1)(rng)];
    EXPECT_EQ(tok_->decode(tok_->encode(s, false, false)), s) << "iteration " << iter;
  }
  // A byte the vocabulary cannot spell is dropped: SmolLM2's unknown token (id 0,
  // <|endoftext|>) is a control token, which plain text must never produce (found by
  // tokenizer_fuzz: "\x04" in a prompt encoded as the end-of-text token).
  EXPECT_EQ(ids_str(tok_->encode("\xFF", false, false)), "");
  EXPECT_EQ(tok_->decode(tok_->encode("a\x04" "b\xFF", false, false)), "ab");
}

TEST_F(SmolLM2Tokenizer, StreamDecoderKeepsCharactersWhole) {
  const std::string text = "ok 🤗 日本 👨‍👩‍👧 done";
  const auto ids = tok_->encode(text, false, false);
  StreamDecoder stream(*tok_);
  std::string joined;
  int partial_tokens = 0;
  for (int32_t id : ids) {
    const std::string piece = tok_->token_to_piece(id);
    const std::string out = stream.push(id);
    if (out.empty() && !piece.empty()) ++partial_tokens;
    for (size_t p = 0; p < out.size();) {
      const size_t len = utf8_valid_len(out, p);
      ASSERT_GT(len, 0u) << "chunk splits a UTF-8 character: token " << id;
      p += len;
    }
    joined += out;
  }
  joined += stream.flush();
  EXPECT_EQ(joined, text);
  EXPECT_GT(partial_tokens, 0) << "no token ended mid-character; the test proves nothing";
}

TEST_F(SmolLM2Tokenizer, StreamDecoderFlushReplacesBrokenTail) {
  const auto ids = tok_->encode("\xF0\x9F", false, false);  // first half of an emoji
  StreamDecoder stream(*tok_);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  EXPECT_EQ(out, "");
  EXPECT_EQ(stream.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(PreTokenizer, MatchesHuggingFaceSplits) {
  const auto records = read_golden(testing::test_data_path("tokenizer_golden.txt"));
  int checked = 0;
  for (const auto& r : records) {
    if (r.tag != "P") continue;
    auto kind = pre_tokenizer_from_name(r.arg);
    ASSERT_TRUE(kind.ok()) << kind.status().to_string();
    std::vector<std::string_view> pieces;
    pre_tokenize(*kind, r.text, pieces);
    std::string got, want;
    for (auto p : pieces) got += "[" + std::string(p) + "]";
    for (const auto& f : r.fields) want += "[" + testing::unhex(f) + "]";
    EXPECT_EQ(got, want) << r.arg << " on '" << r.text << "'";
    ++checked;
  }
  EXPECT_GE(checked, 400);
}

TokenizerData tiny_bpe() {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "gpt2";
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(s, byte_to_codepoint(static_cast<uint8_t>(b)));
    d.tokens.push_back(s);
  }
  d.tokens.push_back("ab");
  d.tokens.push_back("abab");
  d.merges = {"a b", "ab ab"};
  return d;
}

TEST(BpeTokenizer, MergesByRank) {
  auto tok = Tokenizer::create(tiny_bpe());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(ids_str((*tok)->encode("ababa", false, false)), "257 97 ");
  EXPECT_EQ(ids_str((*tok)->encode("aab", false, false)), "97 256 ");
}

TEST(BpeTokenizer, Llama3KeepsWholeVocabularyPieces) {
  // Llama 3 (pre "llama-bpe") takes a pre-tokenized piece that is itself a vocabulary entry
  // as one token even when no merge chain builds it; other pre-tokenizers run the merges.
  TokenizerData d = tiny_bpe();
  d.tokens.push_back("xyz");  // id 258, no merges lead to it
  d.bos = 258;
  d.eos = 257;
  d.add_bos = true;
  d.add_eos = true;
  d.pre = "llama-bpe";
  auto llama = Tokenizer::create(d);
  ASSERT_TRUE(llama.ok()) << llama.status().to_string();
  EXPECT_EQ(ids_str((*llama)->encode("xyz", false, false)), "258 ");
  EXPECT_EQ(ids_str((*llama)->encode("xyz", true, false)), "258 258 257 ");
  d.pre = "gpt2";
  auto gpt2 = Tokenizer::create(d);
  ASSERT_TRUE(gpt2.ok());
  EXPECT_EQ(ids_str((*gpt2)->encode("xyz", false, false)), "120 121 122 ");
}

TEST(BpeTokenizer, RejectsBadData) {
  TokenizerData d = tiny_bpe();
  d.eos = 1000;
  auto r = Tokenizer::create(d);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("eos id 1000"), std::string::npos) << r.status().message();

  d = tiny_bpe();
  d.merges.push_back("zz qq");
  r = Tokenizer::create(d);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("merge 2 'zz qq'"), std::string::npos) << r.status().message();

  d = tiny_bpe();
  d.merges.push_back("nospace");
  EXPECT_FALSE(Tokenizer::create(d).ok());

  d = tiny_bpe();
  d.pre = "klingon";
  r = Tokenizer::create(d);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("klingon"), std::string::npos);

  d = tiny_bpe();
  d.model = "wordpiece";
  EXPECT_FALSE(Tokenizer::create(d).ok());

  d = tiny_bpe();
  d.token_types.assign(3, 1);
  EXPECT_FALSE(Tokenizer::create(d).ok());

  d = tiny_bpe();
  d.tokens.clear();
  d.merges.clear();
  EXPECT_FALSE(Tokenizer::create(d).ok());
}

TEST(BpeTokenizer, UnspellableByteNeverBecomesAControlToken) {
  // Byte 0x04 has no token (its spelling is renamed away). With a control token as unk, as
  // byte-level GGUFs often have (SmolLM2: <|endoftext|>), the byte is dropped; with a real
  // unknown-type token it becomes that token. Found by tokenizer_fuzz.
  TokenizerData d = tiny_bpe();
  d.tokens[4] = "<|endoftext|>";
  d.token_types.assign(d.tokens.size(), kTokenNormal);
  d.token_types[4] = kTokenControl;
  d.unk = 4;
  auto control = Tokenizer::create(d);
  ASSERT_TRUE(control.ok()) << control.status().to_string();
  EXPECT_EQ(ids_str((*control)->encode("a\x04" "b", false, false)), "97 98 ");
  EXPECT_EQ(ids_str((*control)->encode("<|endoftext|>", false, true)), "4 ");
  d.token_types[4] = kTokenUnknown;
  auto unknown = Tokenizer::create(d);
  ASSERT_TRUE(unknown.ok()) << unknown.status().to_string();
  EXPECT_EQ(ids_str((*unknown)->encode("a\x04" "b", false, false)), "97 4 98 ");
}

TEST(HfTokenizerJson, AnIdPastTheFilesEntriesIsAnErrorBeforeAnyAllocation) {
  // Seen writing hf_tokenizer_fuzz: an 87-byte tokenizer.json naming id 2^24 grew the token table
  // to 2^24 strings (1.2 s, 700 MB) before the hole in the ids was reported.
  std::string chat_template;
  auto r = tokenizer_data_from_hf_json(R"({"model":{"type":"BPE","vocab":{"a":16777216}}})", "", &chat_template);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token id 16777216 leaves a hole in the ids (the file has 1 vocab and added entries)"),
            std::string::npos)
      << r.status().message();
  // Added tokens may extend the vocabulary: ids up to vocab + added entries are fine.
  auto ok = tokenizer_data_from_hf_json(
      R"({"added_tokens":[{"id":1,"content":"<s>","special":true}],"model":{"type":"BPE","vocab":{"a":0}}})", "", &chat_template);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->tokens, (std::vector<std::string>{"a", "<s>"}));
  EXPECT_EQ(ok->token_types, (std::vector<int32_t>{kTokenNormal, kTokenControl}));
}

TEST(HfTokenizerJson, WordPieceBecomesTheGgufSpellingWithClsAndSep) {
  // A BERT tokenizer.json (as transformers saves it): "##" marks continuations, the template
  // wraps the text in [CLS] ... [SEP].
  const char* json = R"({
    "added_tokens": [{"id": 0, "content": "[PAD]", "special": true}, {"id": 1, "content": "[UNK]", "special": true},
                     {"id": 2, "content": "[CLS]", "special": true}, {"id": 3, "content": "[SEP]", "special": true}],
    "normalizer": {"type": "BertNormalizer", "lowercase": true},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[CLS]"}},
                       {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "[SEP]"}}]},
    "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
              "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[unused0]": 4, "un": 5, "##aff": 6,
                        "##able": 7, "hello": 8, ",": 9, "!": 10}}})";
  std::string chat_template;
  auto d = tokenizer_data_from_hf_json(json, "", &chat_template);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->model, "bert");
  EXPECT_EQ(d->tokens[4], "[unused0]");
  EXPECT_EQ(d->tokens[5], "\xE2\x96\x81un");
  EXPECT_EQ(d->tokens[6], "aff");
  EXPECT_EQ(d->bos, 2);
  EXPECT_EQ(d->eos, 3);
  EXPECT_TRUE(d->add_bos && d->add_eos);
  auto tok = Tokenizer::create(*d);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(ids_str((*tok)->encode("Hello, UNAFFABLE! world", true, false)), "2 8 9 5 6 7 10 1 3 ");
  auto cased = tokenizer_data_from_hf_json(
      R"({"normalizer": {"type": "BertNormalizer", "lowercase": false}, "model": {"type": "WordPiece", "vocab": {"a": 0}}})",
      "", &chat_template);
  ASSERT_FALSE(cased.ok());
  EXPECT_NE(cased.status().message().find("cased WordPiece"), std::string::npos) << cased.status().to_string();
}

}  // namespace
}  // namespace tessera

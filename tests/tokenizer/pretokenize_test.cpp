// The regex engine, the pre-tokenizer table, and the hand-written matchers against the regex
// lists they stand for.
#include <gtest/gtest.h>
#include <pthread.h>

#include <random>

#include "models/tokenizer/pretokenize.h"
#include "models/tokenizer/regex.h"
#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode.h"

namespace tessera {
namespace {

// The pieces |pattern| splits |text| into, joined by '|'.
std::string split(const std::string& pattern, const std::string& text) {
  auto p = PreTokenizer::from_regexes("test", {pattern});
  if (!p.ok()) return "error: " + p.status().to_string();
  std::vector<std::string_view> pieces;
  p->split(text, pieces);
  std::string s;
  for (size_t i = 0; i < pieces.size(); ++i) s += (i ? "|" : "") + std::string(pieces[i]);
  return s;
}

TEST(Regex, Constructs) {
  EXPECT_EQ(split(R"(\p{L}+)", "ab1cd"), "ab|1|cd");                  // gaps are pieces too
  EXPECT_EQ(split(R"(\p{N}{1,3})", "12345"), "123|45");
  EXPECT_EQ(split(R"(\s+(?!\S)|\s+)", "a   b"), "a|  | |b");            // lookahead backtracks
  EXPECT_EQ(split(R"((?i:'s|'ll)|\p{L}+)", "IT'S we'LL"), "IT|'S| |we|'LL");
  EXPECT_EQ(split(R"([^\s\p{L}]+)", "a,. b"), "a|,.| b");  
  EXPECT_EQ(split(R"(\s+$)", "a  "), "a|  ");                          // $ ends the fragment
  EXPECT_EQ(split(R"([一-龥]+)", "ab漢字c"), "ab|漢字|c");             // non-ASCII ranges
  EXPECT_EQ(split(R"(\p{Lu}\p{Ll}*)", "HelloWorld"), "Hello|World");
  EXPECT_EQ(split(R"(a+?b)", "aab"), "aab");                           // lazy
  EXPECT_EQ(split(R"(a*+a)", "aaa"), "aaa");                           // possessive: no match, one gap
  EXPECT_EQ(split(R"(((?=[\p{L}])([^a-z]))+)", "ABcD"), "AB|c|D");     // lookahead inside a repeat
  EXPECT_EQ(split(R"(\d{1,3}(?=(?:\d{3})*\b))", "1234567"), "1|234|567");
  EXPECT_EQ(split(R"(\p{M}+)", "e\xCC\x81x"), "e|\xCC\x81|x");         // combining acute
}

TEST(Regex, LongInputsNeitherOverflowNorLosePieces) {
  // A repeated group recurses per repetition; 200k letters must not exhaust the stack, and the
  // pieces still cover the text.
  const std::string word(200000, 'a');
  auto p = PreTokenizer::from_name("exaone-moe");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::vector<std::string_view> pieces;
  p->split(word + " b", pieces);
  size_t total = 0;
  for (auto s : pieces) total += s.size();
  EXPECT_EQ(total, word.size() + 2);
}

// The same on a thread with a 2 MB stack (macOS gives secondary threads 512 KB, musl 128 KB):
// group repetitions recurse, and their cap must leave the stack a caller's thread has.
TEST(Regex, LongInputsFitASmallThreadStack) {
  struct Job {
    std::string text = std::string(100000, 'a') + " b";
    size_t total = 0;
    bool ok = false;
  } job;
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, size_t(2) << 20), 0);
  pthread_t thread;
  const auto run = [](void* arg) -> void* {
    auto* j = static_cast<Job*>(arg);
    auto p = PreTokenizer::from_name("exaone-moe");
    if (!p.ok()) return nullptr;
    std::vector<std::string_view> pieces;
    p->split(j->text, pieces);
    for (auto s : pieces) j->total += s.size();
    j->ok = true;
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attr, run, &job), 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  ASSERT_TRUE(job.ok);
  EXPECT_EQ(job.total, job.text.size());
}

TEST(Regex, ErrorsNameThePattern) {
  for (const char* bad : {"(ab", "[ab", "a{3,1}", "*a", R"(\p{Han}+)", "(?<=a)b", R"(\q)"}) {
    auto r = Regex::compile(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().to_string().find(bad), std::string::npos) << r.status().to_string();
  }
}

TEST(PreTokenizer, EveryTableRowCompilesOrNamesWhatItLacks) {
  size_t ok = 0;
  for (const PreTokenizerSpec& s : pre_tokenizer_specs()) {
    auto p = PreTokenizer::from_name(s.names[0]);
    if (p.ok()) {
      ++ok;
      continue;
    }
    // kimi-k2 (\p{Han}) and afmoe (a custom digit rule) need rules this engine does not have.
    EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented) << s.names[0];
    EXPECT_NE(p.status().to_string().find(s.names[0]), std::string::npos) << p.status().to_string();
  }
  EXPECT_GE(ok, pre_tokenizer_specs().size() - 2);
  auto unknown = PreTokenizer::from_name("klingon");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().to_string().find("'klingon'"), std::string::npos);
}

// Random text over the characters the patterns care about.
std::string random_text(std::mt19937& rng, size_t n) {
  static const char* const kAtoms[] = {"a", "B", "z", "'s", "'LL", "'", " ", "  ", "\n", "\r\n", "\t",
                                       "1", "23", "456", ".", ",", "!", "$", "\xC3\xA9", "\xE6\x97\xA5",
                                       "\xD9\xA3", "\xE2\x80\x83", "\xF0\x9F\xA4\x97", "\xCC\x81", "_"};
  std::string s;
  for (size_t i = 0; i < n; ++i) s += kAtoms[rng() % (sizeof(kAtoms) / sizeof(kAtoms[0]))];
  return s;
}

TEST(PreTokenizer, HandWrittenMatchersEqualTheirRegexes) {
  std::mt19937 rng(1234);
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2", "smollm"}) {
    auto p = PreTokenizer::from_name(name);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    for (int t = 0; t < 300; ++t) {
      const std::string text = random_text(rng, 1 + rng() % 24);
      std::vector<std::string_view> fast, slow;
      p->split(text, fast);
      p->split_with_regexes(text, slow);
      ASSERT_EQ(fast, slow) << name << " on '" << text << "'";
    }
  }
}

TEST(Tokenizer, UnknownModelIsAnErrorNamingIt) {
  TokenizerData d;
  d.model = "rwkv";
  d.tokens = {"a"};
  auto t = Tokenizer::create(d);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().to_string().find("'rwkv'"), std::string::npos) << t.status().to_string();
}

TEST(Unicode, NfdAndLowerCase) {
  std::vector<uint32_t> out;
  nfd_append(0xE9, out);    // é -> e + U+0301
  nfd_append(0xD55C, out);  // 한 -> three jamo
  nfd_append('x', out);
  EXPECT_EQ(out, (std::vector<uint32_t>{'e', 0x301, 0x1112, 0x1161, 0x11AB, 'x'}));
  EXPECT_EQ(to_lower('Q'), uint32_t('q'));
  EXPECT_EQ(to_lower(0x416), 0x436u);  // Ж -> ж
  EXPECT_EQ(to_lower(0x65E5), 0x65E5u);
  EXPECT_EQ(unicode_major_class(','), 'P');
  EXPECT_EQ(unicode_major_class('$'), 'S');
  EXPECT_EQ(unicode_major_class(0x301), 'M');
  EXPECT_EQ(unicode_category(0x1C5), UnicodeCategory::kLt);  // Dž
}

}  // namespace
}  // namespace tessera

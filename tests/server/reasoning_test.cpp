// The reasoning split (server/reasoning.h): the splitter gives the same reasoning and content
// however the text arrives in pieces, and the gate forces the close tag at the budget, applies
// the inner grammar only after the close tag, and rolls back and forks exactly.
#include "server/reasoning.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace tessera::server {
namespace {

struct Split {
  std::string reasoning, content;
};

Split split_in_pieces(const std::string& text, bool inside, const std::vector<size_t>& cuts,
                      const ThinkTags& tags = ThinkTags{}) {
  ReasoningSplitter s(tags, inside);
  Split out;
  size_t at = 0;
  for (size_t cut : cuts) {
    s.feed(std::string_view(text).substr(at, cut - at), &out.reasoning, &out.content);
    at = cut;
  }
  s.feed(std::string_view(text).substr(at), &out.reasoning, &out.content);
  s.finish(&out.reasoning, &out.content);
  return out;
}

struct Case {
  std::string text;
  bool inside;
  std::string reasoning, content;
};

TEST(ReasoningSplitter, SameResultForEveryWayTheTextArrives) {
  const std::vector<Case> cases = {
      {"Two and two.\n</think>\n\nThe answer is 4.", true, "Two and two.\n", "The answer is 4."},
      {"<think>abc</think>\n\nhi <think> there", false, "abc", "hi <think> there"},
      {"  \n<think>\nx</think>y", false, "\nx", "y"},
      {"hello <think> x </think> y", false, "", "hello <think> x </think> y"},
      {"still thinking </thi", true, "still thinking </thi", ""},
      {"no tags at all", false, "", "no tags at all"},
      {"<thi", false, "", "<thi"},
      {"</think>", true, "", ""},
      {"a</think>b</think>c", true, "a", "b</think>c"},
  };
  for (const Case& c : cases) {
    const Split whole = split_in_pieces(c.text, c.inside, {});
    EXPECT_EQ(whole.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(whole.content, c.content) << c.text;
    // Every single cut and every pair of cuts (tags split across pieces in every place).
    for (size_t i = 0; i <= c.text.size(); ++i)
      for (size_t j = i; j <= c.text.size(); ++j) {
        const Split s = split_in_pieces(c.text, c.inside, {i, j});
        ASSERT_EQ(s.reasoning, c.reasoning) << c.text << " cut at " << i << ", " << j;
        ASSERT_EQ(s.content, c.content) << c.text << " cut at " << i << ", " << j;
      }
  }
}

// gpt-oss's harmony: the analysis channel is the reasoning, the final channel's message the
// content, with the headers between them stripped; a reply without analysis is all content.
TEST(ReasoningSplitter, HarmonyChannels) {
  const std::vector<Case> cases = {
      {"<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello!", false,
       "User says hi.", "Hello!"},
      {"<|channel|>final<|message|>Just this.", false, "", "Just this."},
      {"<|channel|>analysis<|message|>still going <|en", false, "still going <|en", ""},
      {"<|channel|>analysis<|message|>a<|end|>", false, "a", ""},
      {"plain text", false, "", "plain text"},
      {"<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary to=f", false, "x",
       "<|channel|>commentary to=f"},
  };
  const ThinkTags h = harmony_tags();
  for (const Case& c : cases)
    for (size_t i = 0; i <= c.text.size(); ++i)
      for (size_t j = i; j <= c.text.size(); j += 3) {
        const Split s = split_in_pieces(c.text, c.inside, {i, j}, h);
        ASSERT_EQ(s.reasoning, c.reasoning) << c.text << " cut at " << i << ", " << j;
        ASSERT_EQ(s.content, c.content) << c.text << " cut at " << i << ", " << j;
      }
  ASSERT_TRUE(think_tags_of("{{- '<|channel|>analysis<|message|>' + m.thinking + '<|end|>' }}"
                            "{{- '<|channel|>final<|message|>' + m.content }}")
                  .has_value());
  EXPECT_EQ(think_tags_of("<|channel|>analysis<|message|> <|channel|>final<|message|>")->open, h.open);
}

TEST(ReasoningSplitter, HoldsBackOnlyAPossibleTag) {
  ReasoningSplitter s(ThinkTags{}, true);
  std::string r, c;
  s.feed("abc</th", &r, &c);
  EXPECT_EQ(r, "abc");  // "</th" may begin the close tag
  s.feed("ese", &r, &c);
  EXPECT_EQ(r, "abc</these");
  EXPECT_TRUE(s.in_reasoning());
}

TEST(ReasoningTags, FromTheTemplateAndThePrompt) {
  EXPECT_TRUE(think_tags_of("{{ '<think>\\n' }}...{{ '</think>' }}").has_value());
  EXPECT_FALSE(think_tags_of("{{ messages }}").has_value());
  const ThinkTags t;
  EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n", t));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n", t));
  EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n", t));
  EXPECT_TRUE(prompt_opens_thinking("<think>a</think> ... <think>\n", t));
}

// Tokens: 0 "a", 1 "b", 2 "</think>", 3 "\n", 4 "{", 5 "}", 6 "</", 7 "think>"; 40 in all.
std::shared_ptr<const TokenPieces> pieces() {
  auto p = std::make_shared<TokenPieces>(40, "z");
  const char* named[] = {"a", "b", "</think>", "\n", "{", "}", "</", "think>"};
  for (size_t i = 0; i < 8; ++i) (*p)[i] = named[i];
  return p;
}

std::vector<int32_t> allowed(Grammar& g) {
  std::vector<uint32_t> mask(size_t(mask_words(g.vocab_size())));
  const int32_t n = g.fill_mask(mask.data());
  std::vector<int32_t> out;
  for (int32_t t = 0; t < g.vocab_size(); ++t)
    if (mask_allows(mask.data(), t)) out.push_back(t);
  EXPECT_EQ(int32_t(out.size()), n);
  if (g.vocab_size() % 32) {
    EXPECT_EQ(mask.back() >> (g.vocab_size() % 32), 0u) << "bits past the vocabulary";
  }
  return out;
}

// "{" then "}", then only the end: a stand-in for a structured-output grammar.
class Braces final : public Grammar {
 public:
  int32_t fill_mask(uint32_t* mask) override {
    std::fill(mask, mask + mask_words(40), 0u);
    if (n_ < 2) mask[0] |= 1u << (n_ == 0 ? 4 : 5);
    return n_ < 2 ? 1 : 0;
  }
  bool accept(int32_t t) override {
    if (n_ >= 2 || t != (n_ == 0 ? 4 : 5)) return false;
    ++n_;
    return true;
  }
  void rollback(int32_t n) override { n_ -= n; }
  std::unique_ptr<Grammar> fork() const override { return std::make_unique<Braces>(*this); }
  bool terminated() const override { return n_ == 2; }
  int32_t vocab_size() const override { return 40; }
  int n_ = 0;
};

TEST(ReasoningGate, ForcesTheCloseTagAtTheBudget) {
  ReasoningGate g(pieces(), ThinkTags{}, /*budget=*/3, /*close=*/{3, 2, 3}, nullptr);
  EXPECT_EQ(allowed(g).size(), 40u);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(g.accept(i % 2));  // a b a: the budget is spent
  EXPECT_EQ(allowed(g), std::vector<int32_t>({3}));
  EXPECT_FALSE(g.accept(0));  // only the forced token
  ASSERT_TRUE(g.accept(3));
  EXPECT_EQ(allowed(g), std::vector<int32_t>({2}));
  ASSERT_TRUE(g.accept(2));
  ASSERT_TRUE(g.accept(3));
  EXPECT_EQ(allowed(g).size(), 40u);  // the answer: free
  // Back into the forced run, then out again the same way.
  g.rollback(3);
  EXPECT_EQ(allowed(g), std::vector<int32_t>({3}));
  g.rollback(1);
  EXPECT_EQ(allowed(g).size(), 40u);  // two reasoning tokens: the third is free again
}

TEST(ReasoningGate, ZeroBudgetClosesAtOnceAndUnlimitedNever) {
  ReasoningGate zero(pieces(), ThinkTags{}, 0, {3, 2}, nullptr);
  EXPECT_EQ(allowed(zero), std::vector<int32_t>({3}));
  ReasoningGate unlimited(pieces(), ThinkTags{}, -1, {3, 2}, nullptr);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(unlimited.accept(i % 2));
  EXPECT_EQ(allowed(unlimited).size(), 40u);
}

TEST(ReasoningGate, TheInnerGrammarStartsAfterTheModelClosesItsReasoning) {
  ReasoningGate g(pieces(), ThinkTags{}, -1, {3, 2}, std::make_unique<Braces>());
  EXPECT_EQ(allowed(g).size(), 40u);  // thinking: anything, "{" included
  ASSERT_TRUE(g.accept(0));
  ASSERT_TRUE(g.accept(6));  // "</" then "think>": the tag across two tokens
  EXPECT_EQ(allowed(g).size(), 40u);
  ASSERT_TRUE(g.accept(7));
  EXPECT_EQ(allowed(g), std::vector<int32_t>({4}));
  EXPECT_FALSE(g.accept(0));
  auto fork = g.fork();
  ASSERT_TRUE(g.accept(4));
  ASSERT_TRUE(g.accept(5));
  EXPECT_TRUE(g.terminated());
  EXPECT_FALSE(fork->terminated());  // the fork kept its own state
  EXPECT_EQ(allowed(*fork), std::vector<int32_t>({4}));
  g.rollback(3);  // "}", "{" and the tag's second half: thinking again, the inner grammar reset
  EXPECT_FALSE(g.terminated());
  EXPECT_EQ(allowed(g).size(), 40u);
  ASSERT_TRUE(g.accept(7));
  EXPECT_EQ(allowed(g), std::vector<int32_t>({4}));
}

TEST(ReasoningGate, RejectsOutOfRangeTokens) {
  ReasoningGate g(pieces(), ThinkTags{}, -1, {3}, nullptr);
  EXPECT_FALSE(g.accept(-1));
  EXPECT_FALSE(g.accept(40));
}

}  // namespace
}  // namespace tessera::server

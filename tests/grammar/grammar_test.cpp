// GrammarCompiler (grammar/compiler.h) on a small vocabulary, so every mask can be spelt out.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "grammar/compiler.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

// id: 0 end of generation (special), 1 "{", 2 "}", 3 "\"", 4 "a", 5 "b", 6 ":", 7 ",", 8 "1", 9 "2",
// 10 "true", 11 "\"a\"", 12 " ", 13 "x", 14 "[", 15 "]", 16 "-", 17 "0"; 18 and 19: past the
// tokenizer (padding of the model's vocabulary).
const std::vector<std::string> kPieces = {"", "{", "}", "\"", "a", "b", ":", ",", "1", "2", "true", "\"a\"", " ", "x", "[", "]", "-", "0"};
constexpr int32_t kVocab = 20;
constexpr int32_t kEos = 0;

std::unique_ptr<GrammarCompiler> compiler() {
  GrammarVocab v;
  v.pieces = kPieces;
  v.stop_ids = {kEos};
  v.vocab_size = kVocab;
  auto c = GrammarCompiler::create(v);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::set<int32_t> allowed(Grammar& g) {
  std::vector<uint32_t> mask(size_t(mask_words(kVocab)), 0xdeadbeefu);
  const int32_t n = g.fill_mask(mask.data());
  std::set<int32_t> out;
  for (int32_t t = 0; t < kVocab; ++t)
    if (mask_allows(mask.data(), t)) out.insert(t);
  EXPECT_EQ(n, int32_t(out.size()));
  return out;
}

// A missing XGrammar is a skip on a developer's machine and a failure under CI=true.
#define REQUIRE_XGRAMMAR() \
  if (!GrammarCompiler::available()) TESSERA_SKIP_MISSING() << "this build has no XGrammar: " << GrammarCompiler::why_unavailable()

const char* kSchema = R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                          "additionalProperties": false})";

TEST(Grammar, JsonSchemaMaskAcceptAndEnd) {
  REQUIRE_XGRAMMAR();
  auto c = compiler();
  ASSERT_TRUE(c);
  auto proto = c->compile({GrammarSpec::Kind::kJsonSchema, kSchema, true});
  ASSERT_TRUE(proto.ok()) << proto.status().to_string();
  auto g = (*proto)->fork();
  EXPECT_EQ(g->vocab_size(), kVocab);
  EXPECT_EQ(allowed(*g), (std::set<int32_t>{1}));  // "{" only: compact JSON, no leading space
  ASSERT_TRUE(g->accept(1));
  EXPECT_EQ(allowed(*g), (std::set<int32_t>{3, 11}));  // the key, whole or opening its quote
  EXPECT_FALSE(g->accept(2)) << "'}' before the required key";
  ASSERT_TRUE(g->accept(11));
  EXPECT_EQ(allowed(*g), (std::set<int32_t>{6}));
  ASSERT_TRUE(g->accept(6));
  const auto ints = allowed(*g);
  EXPECT_TRUE(ints.count(8) && ints.count(16) && ints.count(17)) << "digits and a minus sign";
  EXPECT_FALSE(ints.count(3) || ints.count(10)) << "no string, no boolean";
  ASSERT_TRUE(g->accept(8));
  ASSERT_TRUE(g->accept(2));
  EXPECT_EQ(allowed(*g), (std::set<int32_t>{kEos}));  // complete: only the end
  EXPECT_FALSE(g->terminated());
  ASSERT_TRUE(g->accept(kEos));
  EXPECT_TRUE(g->terminated());
  EXPECT_TRUE(allowed(*g).empty());
}

TEST(Grammar, RollbackAndFork) {
  REQUIRE_XGRAMMAR();
  auto c = compiler();
  ASSERT_TRUE(c);
  auto proto = c->compile({GrammarSpec::Kind::kJsonSchema, kSchema, true});
  ASSERT_TRUE(proto.ok()) << proto.status().to_string();
  auto g = (*proto)->fork();
  ASSERT_TRUE(g->accept(1));
  ASSERT_TRUE(g->accept(11));
  ASSERT_TRUE(g->accept(6));
  g->rollback(2);
  EXPECT_EQ(allowed(*g), (std::set<int32_t>{3, 11}));
  auto f = g->fork();
  ASSERT_TRUE(f->accept(11));
  EXPECT_EQ(allowed(*f), (std::set<int32_t>{6}));
  EXPECT_EQ(allowed(*g), (std::set<int32_t>{3, 11})) << "a fork's tokens do not move the original";
  EXPECT_EQ(allowed(*(*proto)->fork()), (std::set<int32_t>{1})) << "the prototype stays at the start";
}

TEST(Grammar, EbnfRegexAndJsonObject) {
  REQUIRE_XGRAMMAR();
  auto c = compiler();
  ASSERT_TRUE(c);
  auto ebnf = c->compile({GrammarSpec::Kind::kEbnf, R"(root ::= "[" ("a" | "b")* "]")", true});
  ASSERT_TRUE(ebnf.ok()) << ebnf.status().to_string();
  auto e = (*ebnf)->fork();
  EXPECT_EQ(allowed(*e), (std::set<int32_t>{14}));
  ASSERT_TRUE(e->accept(14));
  EXPECT_EQ(allowed(*e), (std::set<int32_t>{4, 5, 15}));
  auto regex = c->compile({GrammarSpec::Kind::kRegex, "-?[12]+", true});
  ASSERT_TRUE(regex.ok()) << regex.status().to_string();
  auto r = (*regex)->fork();
  EXPECT_EQ(allowed(*r), (std::set<int32_t>{8, 9, 16}));
  ASSERT_TRUE(r->accept(9));
  EXPECT_EQ(allowed(*r), (std::set<int32_t>{kEos, 8, 9}));
  auto obj = c->compile({GrammarSpec::Kind::kJson, "", true});
  ASSERT_TRUE(obj.ok()) << obj.status().to_string();
  EXPECT_EQ(allowed(*(*obj)->fork()), (std::set<int32_t>{1}));
}

TEST(Grammar, ADeadEndAllowsNothing) {
  REQUIRE_XGRAMMAR();
  auto c = compiler();
  ASSERT_TRUE(c);
  // No token spells "c": nothing can start the text, and the end is not allowed either.
  auto g = c->compile({GrammarSpec::Kind::kRegex, "c", true});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(allowed(*(*g)->fork()).empty());
}

TEST(Grammar, InvalidInputsNameTheError) {
  REQUIRE_XGRAMMAR();
  auto c = compiler();
  ASSERT_TRUE(c);
  struct Case {
    GrammarSpec spec;
    const char* want;
  } cases[] = {
      {{GrammarSpec::Kind::kJsonSchema, R"({"type": "no-such-type"})", true}, "invalid json_schema: "},
      {{GrammarSpec::Kind::kJsonSchema, R"({"type": "object")", true}, "invalid json_schema: "},
      {{GrammarSpec::Kind::kEbnf, R"(root ::= undefined_rule)", true}, "invalid ebnf: "},
      {{GrammarSpec::Kind::kRegex, "(ab", true}, "invalid regex: "},
  };
  for (const Case& k : cases) {
    auto r = c->compile(k.spec);
    ASSERT_FALSE(r.ok()) << k.spec.source;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << k.spec.source;
    EXPECT_EQ(r.status().message().rfind(k.want, 0), 0u) << r.status().message();
    EXPECT_GT(r.status().message().size(), std::string(k.want).size() + 3) << "XGrammar's own message follows";
  }
}

TEST(Grammar, BadVocabulariesAreRefused) {
  if (!GrammarCompiler::available()) {
    // The stub: create() says why, and the why names XGrammar.
    auto c = GrammarCompiler::create({});
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(c.status().message().find("XGrammar"), std::string::npos) << c.status().message();
    if (testing::running_in_ci()) FAIL() << "CI=true and this build has no XGrammar: " << GrammarCompiler::why_unavailable();
    return;
  }
  GrammarVocab v;
  v.pieces = kPieces;
  v.vocab_size = 5;  // below the tokenizer's count
  EXPECT_EQ(GrammarCompiler::create(v).status().code(), StatusCode::kInvalidArgument);
  v.vocab_size = kVocab;
  v.stop_ids = {kVocab};
  EXPECT_EQ(GrammarCompiler::create(v).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera

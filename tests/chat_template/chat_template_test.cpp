// Chat templates rendered byte-identically to jinja2 as transformers configures it
// (tests/data/chat_template_golden.txt, from gen_golden.py), plus error reporting.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "models/chat_template/chat_template.h"
#include "tests/support/test_support.h"
#include "tests/tokenizer/gguf_meta.h"
#include "tests/tokenizer/golden.h"

namespace tessera {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  return out;
}

std::string smollm2_template() {
  const char* dir = std::getenv("TESSERA_MODELS");
  auto vocab = testing::read_gguf_vocab(std::string(dir ? dir : "models-cache") +
                                        "/SmolLM2-135M-Instruct.Q4_1.gguf");
  return vocab.ok() ? vocab->chat_template : "";
}

TEST(ChatTemplate, MatchesJinja2) {
  // gen_golden.py renders strftime_now at this instant (gpt-oss's system message prints the date).
  setenv("SOURCE_DATE_EPOCH", "1767225600", 1);
  const auto records = testing::read_golden(testing::test_data_path("chat_template_golden.txt"));
  std::map<std::string, std::vector<ChatMessage>> conversations;
  std::map<std::string, std::string> sources;
  sources["smollm2"] = smollm2_template();
  const std::map<std::string, std::string> extra = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  int rendered = 0, raised = 0, smollm2 = 0;
  for (const auto& r : records) {
    const auto key = split(r.arg, ':');
    if (r.tag == "M") {
      conversations[key[0]].push_back({key[1], r.text});
      continue;
    }
    ASSERT_EQ(key.size(), 3u) << r.arg;
    if (!sources.count(key[0]))
      sources[key[0]] = read_file(testing::test_data_path("chat_templates/" + key[0] + ".jinja"));
    if (sources[key[0]].empty()) {
      // Only SmolLM2's template comes from outside tests/data (the GGUF in models-cache).
      if (key[0] != "smollm2") ADD_FAILURE() << "no source for template " << key[0];
      continue;
    }
    auto tmpl = ChatTemplate::parse(sources[key[0]]);
    ASSERT_TRUE(tmpl.ok()) << key[0] << ": " << tmpl.status().to_string();
    auto out = tmpl->render(conversations.at(key[1]), key[2] == "1", extra);
    if (r.tag == "R") {
      ASSERT_TRUE(out.ok()) << r.arg << ": " << out.status().to_string();
      EXPECT_EQ(*out, r.text) << r.arg;
      ++rendered;
      smollm2 += key[0] == "smollm2";
    } else {
      ASSERT_FALSE(out.ok()) << r.arg << " should raise";
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(out.status().message(), r.text);
      ++raised;
    }
  }
  EXPECT_GE(rendered, 26);  // 5 templates in tests/data x 3 conversations x 2, less those raising
  if (!sources["smollm2"].empty()) {
    EXPECT_EQ(smollm2, 6);
  }
  EXPECT_GE(raised, 1);
}

TEST(ChatTemplate, SmolLM2Conversation) {
  const std::string src = smollm2_template();
  if (src.empty()) TESSERA_SKIP_MISSING() << "SmolLM2 GGUF unavailable";
  auto tmpl = ChatTemplate::parse(src);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  auto out = tmpl->render({{"user", "Hi"}}, true);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// gpt-oss's harmony template: the system message carries the date (pinned by SOURCE_DATE_EPOCH),
// the reasoning effort (a chat_template_kwargs member) and the channels; the generation prompt
// opens an assistant turn without a channel, which the model then names.
TEST(ChatTemplate, GptOssHarmony) {
  setenv("SOURCE_DATE_EPOCH", "1767225600", 1);
  auto tmpl = ChatTemplate::parse(read_file(testing::test_data_path("chat_templates/gpt-oss.jinja")));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  auto out = tmpl->render({{"user", "Hi"}}, true, {}, {}, R"({"reasoning_effort": "high"})");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            "Knowledge cutoff: 2024-06\nCurrent date: 2026-01-01\n\nReasoning: high\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message."
            "<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant");
}

struct ErrorCase {
  const char* source;
  const char* where;  // "line:col" the message must name
  const char* what;
};

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  const ErrorCase cases[] = {
      {"Hello\n{% if x %}\n  {{ x + }}\n{% endif %}", "3:10", "unexpected '}}'"},
      {"{% for m in messages %}\n{{ m }}", "2:8", "expected 'else' or 'endfor'"},
      {"a\nb {% frobnicate %}", "2:6", "unknown tag 'frobnicate'"},
      {"{{ 'unterminated }}", "1:4", "unterminated string"},
      {"x\n  {{ a $ b }}", "2:8", "unexpected character '$'"},
      {"{% if a %}{% endfor %}", "1:14", "expected 'elif' or 'else' or 'endif'"},
      {"{# never closed", "1:1", "unterminated comment"},
  };
  for (const auto& c : cases) {
    auto r = ChatTemplate::parse(c.source);
    ASSERT_FALSE(r.ok()) << c.source;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    const std::string& msg = r.status().message();
    EXPECT_NE(msg.find(std::string(": ") + c.where + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.what), std::string::npos) << msg;
  }
}

TEST(ChatTemplate, RaiseExceptionIsInvalidArgument) {
  auto tmpl = ChatTemplate::parse(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}ok");
  ASSERT_TRUE(tmpl.ok());
  auto bad = tmpl->render({{"assistant", "x"}}, false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "first message must be from the user");
  auto good = tmpl->render({{"user", "x"}}, false);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, "ok");
}

TEST(ChatTemplate, RuntimeErrorsNamePosition) {
  auto tmpl = ChatTemplate::parse("line one\n{{ messages[0].content.nosuch() }}");
  ASSERT_TRUE(tmpl.ok());
  auto r = tmpl->render({{"user", "x"}}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("2:"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("nosuch"), std::string::npos) << r.status().message();

  tmpl = ChatTemplate::parse("{{ missing.attr }}");
  ASSERT_TRUE(tmpl.ok());
  r = tmpl->render({}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'missing' is undefined"), std::string::npos) << r.status().message();

  tmpl = ChatTemplate::parse("{{ 1 + 'a' }}");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_FALSE(tmpl->render({}, false).ok());
}

TEST(ChatTemplate, ExtraVariablesAndUndefined) {
  auto tmpl = ChatTemplate::parse("{{ bos_token }}[{{ nothing }}]{{ date_string | default('none') }}|{{ tools is defined }}");
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->render({}, false, {{"bos_token", "<s>"}, {"date_string", "26 Jul 2024"}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "<s>[]26 Jul 2024|False");
}

TEST(ChatTemplate, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it;
  // '-' strips all whitespace on its side; a variable tag keeps both; one trailing newline goes.
  auto tmpl = ChatTemplate::parse("a\n  {% if true %}\nb\n  {{- 'c' }}  \n{{ 'd' -}}\n\n  e\n  {% endif %}\n f\n");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  auto out = tmpl->render({}, false);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "a\nbc  \nde\n f");  // as jinja2 renders it
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(ChatTemplate, MutatedTemplatesFailCleanly) {
  // Random edits of a real template must parse or fail with InvalidArgument, and render or
  // fail with a Status: never crash, hang or abort (run under ASan in CI's sanitizer build).
  const std::string base = [] {
    std::ifstream f(testing::test_data_path("chat_templates/qwen25.jinja"));
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }();
  ASSERT_FALSE(base.empty());
  const std::string junk = "{}%#-+()[]'\".|~:,=! \nxif";
  std::mt19937 rng(2024);
  int parsed = 0, rejected = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string s = base;
    const int edits = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int e = 0; e < edits; ++e) {
      const size_t at = std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng);
      const char c = junk[std::uniform_int_distribution<size_t>(0, junk.size() - 1)(rng)];
      switch (std::uniform_int_distribution<int>(0, 2)(rng)) {
        case 0: s.erase(at, 1); break;
        case 1: s.insert(at, 1, c); break;
        default: s[at] = c;
      }
    }
    auto t = ChatTemplate::parse(s);
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().to_string();
      EXPECT_NE(t.status().message().find("chat template: "), std::string::npos);
      ++rejected;
      continue;
    }
    ++parsed;
    auto out = t->render({{"system", "s"}, {"user", "u"}, {"tool", "t"}}, true);
    if (!out.ok()) {
      EXPECT_FALSE(out.status().message().empty());
    }
  }
  EXPECT_GT(parsed, 10);
  EXPECT_GT(rejected, 10);
}

TEST(ChatTemplate, RunawayTemplateIsStopped) {
  auto t = ChatTemplate::parse(
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}x{% endmacro %}{{ f(40) }}");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto out = t->render({}, false);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kResourceExhausted) << out.status().to_string();
  auto small = ChatTemplate::parse(
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}x{% endmacro %}{{ f(3) }}");
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(*small->render({}, false), std::string(15, 'x'));
}

TEST(ChatTemplate, DeepNestingIsAnError) {
  // 1500 levels: deeper than the parser's bound, in fewer tokens than a tag may have.
  const std::string deep = "{{ " + std::string(1500, '(') + "1" + std::string(1500, ')') + " }}";
  auto t = ChatTemplate::parse(deep);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nesting deeper"), std::string::npos) << t.status().message();
  auto ok = ChatTemplate::parse("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}");
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok->render({}, false), "1");
}

// Found writing chat_template_fuzz (each reproduced through it under UBSan/ASan): integer
// arithmetic overflowed int64 (undefined behaviour; INT64_MIN // -1 traps on x86), range()
// overflowed computing its length and its last step, 2 ** 64 silently capped the loop at 64
// factors ((-1) ** 65 gave 1), and repetition / doubling built strings of gigabytes. Each is now
// an error, and the in-range cases still compute.
TEST(ChatTemplate, IntegerOverflowIsAnError) {
  const char* overflowing[] = {
      "{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}", "{{ 4611686018427387904 * 2 }}",
      "{{ 3 ** 63 }}", "{{ (-9223372036854775807 - 1) // -1 }}", "{{ -(-9223372036854775807 - 1) }}",
      "{{ (-9223372036854775807 - 1) | abs }}"};
  for (const char* src : overflowing) {
    auto tmpl = ChatTemplate::parse(src);
    ASSERT_TRUE(tmpl.ok()) << src << ": " << tmpl.status().to_string();
    auto out = tmpl->render({}, false);
    ASSERT_FALSE(out.ok()) << src << " gave " << *out;
    EXPECT_NE(out.status().message().find("overflow"), std::string::npos) << src << ": " << out.status().message();
  }
  const std::pair<const char*, const char*> fine[] = {
      {"{{ 9223372036854775806 + 1 }}", "9223372036854775807"}, {"{{ 2 ** 62 }}", "4611686018427387904"},
      {"{{ (-1) ** 65 }}", "-1"}, {"{{ 1 ** 1000000000000 }}", "1"}, {"{{ -7 // -1 }} {{ -7 % -1 }} {{ -7 // 2 }}", "7 0 -4"},
      {"{{ range(9223372036854775800, 9223372036854775807, 3) | list }}",
       "[9223372036854775800, 9223372036854775803, 9223372036854775806]"},
      {"{{ range(5, -4, -3) | list }}", "[5, 2, -1]"}};
  for (const auto& [src, want] : fine) {
    auto tmpl = ChatTemplate::parse(src);
    ASSERT_TRUE(tmpl.ok()) << src << ": " << tmpl.status().to_string();
    auto out = tmpl->render({}, false);
    ASSERT_TRUE(out.ok()) << src << ": " << out.status().to_string();
    EXPECT_EQ(*out, want) << src;
  }
  auto huge = ChatTemplate::parse("{{ range(-9223372036854775807, 9223372036854775807) }}");
  ASSERT_TRUE(huge.ok());
  auto r = huge->render({}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 100000 items"), std::string::npos) << r.status().message();
}

// Found by chat_template_fuzz (a crash: std::stoll's out_of_range escaped the parser, through
// "x.333333333333333333333", Jinja's x[333...]); std::stod had the same hole for 1e999.
TEST(ChatTemplate, NumberLiteralsPastTheirRangeDoNotThrow) {
  for (const char* src : {"{{ ns.333333333333333333333 }}", "{{ 99999999999999999999 }}"}) {
    auto tmpl = ChatTemplate::parse(src);
    ASSERT_FALSE(tmpl.ok()) << src;
    EXPECT_EQ(tmpl.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(tmpl.status().message().find("out of range"), std::string::npos) << tmpl.status().message();
  }
  auto floats = ChatTemplate::parse("{{ 1e999 > 1e308 }} {{ 1e-999 == 0 }} {{ [7, 8].1 }}");
  ASSERT_TRUE(floats.ok()) << floats.status().to_string();
  auto out = floats->render({}, false);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "True True 8");  // as Python: float('1e999') is inf, 1e-999 is 0.0
}

// `set ns.x = ns` makes the namespace own itself (a shared_ptr cycle): found by
// chat_template_fuzz as a leak. The renderer breaks the cycle when it ends; under the
// sanitizer build LeakSanitizer fails this test if it does not.
TEST(ChatTemplate, ANamespaceThatHoldsItselfRendersAndIsFreed) {
  auto tmpl = ChatTemplate::parse(
      "{% set ns = namespace(a=1) %}{% set ns.self = ns %}{% set ns.l = [ns, ns] %}{{ ns.self.a }}{{ ns.l | length }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  auto out = tmpl->render({}, false);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "12");
}

// A long a+b+c+... chain parses in a loop into a deep tree; evaluating it recursed once per
// term and overflowed the stack at a few thousand terms (found by chat_template_fuzz).
TEST(ChatTemplate, ALongOperatorChainIsAnErrorNotAStackOverflow) {
  std::string huge = "{{ 1";
  for (int i = 0; i < 100000; ++i) huge += "+1";
  auto refused = ChatTemplate::parse(huge + " }}");  // a 200,001-token tag is refused at parse
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tokens (at most"), std::string::npos) << refused.status().message();
  std::string chain = "{{ 1";
  for (int i = 0; i < 1500; ++i) chain += "+1";
  auto deep = ChatTemplate::parse(chain + " }}");
  ASSERT_TRUE(deep.ok()) << deep.status().to_string();
  auto out = deep->render({}, false);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("nested deeper"), std::string::npos) << out.status().message();
  std::string shallow = "{{ 1";
  for (int i = 0; i < 100; ++i) shallow += "+1";
  auto ok = ChatTemplate::parse(shallow + " }}");
  ASSERT_TRUE(ok.ok());
  auto r = ok->render({}, false);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, "101");
}

TEST(ChatTemplate, ValuesPastTheSizeLimitsAreErrors) {
  const char* growing[] = {
      "{% set s = 'a' * 100000 %}{{ (s * 100000) | length }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
      "{% set s = 'a\n' * 50000 %}{{ (s | indent(100000)) | length }}",
      "{{ 'x' | indent(-1) }}",
      "{% set s = 'a' * 100000 %}{{ (s.replace('a', s)) | length }}",
      "{% set s = 'a' * 100000 %}{{ ([s] * 1000) | join(s) | length }}"};
  for (const char* src : growing) {
    auto tmpl = ChatTemplate::parse(src);
    ASSERT_TRUE(tmpl.ok()) << src << ": " << tmpl.status().to_string();
    auto out = tmpl->render({}, false);
    ASSERT_FALSE(out.ok()) << src << " rendered " << out->size() << " bytes";
  }
  auto ok = ChatTemplate::parse("{{ ('ab' * 1000) | length }} {{ 'a\nb' | indent(2) }}");
  ASSERT_TRUE(ok.ok());
  auto out = ok->render({}, false);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "2000 a\n  b");
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// OpenAI's tools reach a template with a tool section as a `tools` list of dicts, as
// transformers passes them (server/structured.cpp relies on uses_tools to choose this path).
TEST(ChatTemplate, ToolsAreAListOfDictsForTemplatesThatReadThem) {
  auto tmpl = ChatTemplate::parse(
      "{% for t in tools %}[{{ t.function.name }}:{{ t.function.parameters.required | length }}:"
      "{{ t.function.parameters.properties.n.maximum }}:{{ t.function.strict }}]{% endfor %}{{ messages[0].content }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().to_string();
  EXPECT_TRUE(tmpl->uses_tools());
  const std::string tools = R"([{"type": "function", "function": {"name": "f", "strict": true,
      "parameters": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}}, "required": ["n"]}}}])";
  auto out = tmpl->render({{"user", "hi"}}, true, {}, tools);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "[f:1:9:True]hi");
  EXPECT_EQ(tmpl->render({{"user", "hi"}}, true, {}, "{not json").status().code(), StatusCode::kInvalidArgument);
  auto plain = ChatTemplate::parse("{{ messages[0].content }}{# toolset, my_tools #}");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->uses_tools()) << "only the identifier itself counts";
}

}  // namespace
}  // namespace tessera

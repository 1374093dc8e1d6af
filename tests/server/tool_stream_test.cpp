// Streamed tool calls (server/tool_stream.h): a reply fed in chunks of every size gives content
// and tool_calls deltas whose concatenations are what parse_tool_calls reads from the whole
// reply: the same calls, ids and arguments, and the same content before them. No marker of a
// call format ever reaches the content.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "server/structured.h"
#include "server/tool_stream.h"

namespace tessera::server {
namespace {

using nlohmann::json;

ParsedRequest weather_request() {
  ParsedRequest r;
  r.chat = true;
  r.stream = true;
  r.tools.push_back({"get_weather", "", json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"}}})")});
  r.tools.push_back({"get_time", "", json::parse(R"({"type": "object", "properties": {"zone": {"type": "string"}}})")});
  return r;
}

struct Streamed {
  std::string content;
  json calls = json::array();  // {id, name, arguments} per index, arguments concatenated
  int deltas = 0;              // tool_call deltas received
};

// Feeds |text| in chunks whose sizes come from |seed| (1..max_chunk bytes), then finishes.
Streamed stream(const ParsedRequest& req, const std::string& text, uint32_t seed, int max_chunk) {
  ToolCallStream ts(req, "c-");
  Streamed out;
  std::mt19937 rng(seed);
  std::string so_far;
  size_t at = 0;
  const auto take = [&](const ToolCallStream::Delta& d) {
    out.content += d.content;
    for (const json& tc : d.tool_calls) {
      const size_t i = tc["index"].get<size_t>();
      ++out.deltas;
      if (tc.contains("id")) {
        ASSERT_EQ(i, out.calls.size()) << "calls open in order, each once";
        EXPECT_EQ(tc["type"], "function");
        out.calls.push_back(
            {{"id", tc["id"]}, {"name", tc["function"]["name"]}, {"arguments", tc["function"]["arguments"]}});
      } else {
        ASSERT_LT(i, out.calls.size()) << "arguments of a call that was not opened";
        EXPECT_FALSE(tc["function"].contains("name"));
        out.calls[i]["arguments"] =
            out.calls[i]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
      }
    }
  };
  while (at < text.size()) {
    const size_t n = std::min(text.size() - at, size_t(1 + rng() % uint32_t(max_chunk)));
    so_far += text.substr(at, n);
    at += n;
    take(ts.update(so_far, false));
  }
  take(ts.update(so_far, true));
  EXPECT_EQ(ts.opened_calls(), !out.calls.empty());
  return out;
}

// Every chunking gives what parse_tool_calls gives for the whole text.
void expect_matches_whole(const ParsedRequest& req, const std::string& text, const std::string& expected_content) {
  std::string before;
  const json whole = parse_tool_calls(req, text, "c-", &before);
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    const int max_chunk = seed <= 10 ? 1 : int(seed);
    const Streamed s = stream(req, text, seed, max_chunk);
    SCOPED_TRACE("seed " + std::to_string(seed));
    EXPECT_EQ(s.content, expected_content);
    if (whole.is_null()) {
      EXPECT_TRUE(s.calls.empty()) << s.calls.dump();
      continue;
    }
    ASSERT_EQ(s.calls.size(), whole.size()) << s.calls.dump();
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(s.calls[i]["id"], whole[i]["id"]);
      EXPECT_EQ(s.calls[i]["name"], whole[i]["function"]["name"]);
      const json args = json::parse(s.calls[i]["arguments"].get<std::string>(), nullptr, false);
      ASSERT_FALSE(args.is_discarded()) << "the fragments concatenate to JSON: " << s.calls[i]["arguments"];
      EXPECT_EQ(args, json::parse(whole[i]["function"]["arguments"].get<std::string>()));
    }
    if (seed > 10) { EXPECT_GT(s.deltas, int(whole.size())) << "arguments arrive in more than one delta"; }
  }
}

TEST(ToolCallStream, HermesBlocksAfterText) {
  const auto req = weather_request();
  expect_matches_whole(
      req,
      "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo \\\"N\\\"\", "
      "\"days\": 3, \"opts\": {\"a\": [1, {\"b\": \"}\"}]}}}\n</tool_call>\n<tool_call>\n"
      "{\"arguments\": {\"zone\": \"CET\"}, \"name\": \"get_time\"}\n</tool_call>\n",
      "Let me check both.\n");
}

TEST(ToolCallStream, Qwen35XmlFunctions) {
  const auto req = weather_request();
  expect_matches_whole(
      req,
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"metric\": true}\n</parameter>\n</function>\n</tool_call>"
      "\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
      "");
}

TEST(ToolCallStream, TheWholeReplyOneJsonCall) {
  const auto req = weather_request();
  expect_matches_whole(req, R"(  {"name": "get_time", "arguments": {"zone": "UTC"}})", "");
}

TEST(ToolCallStream, HarmonyPreambleThenCall) {
  const auto req = weather_request();
  expect_matches_whole(
      req,
      "<|channel|>commentary<|message|>Checking the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 2}",
      "Checking the weather.");
}

// Replies that are not calls are content, byte for byte, including text that looks like the
// start of a marker and JSON that does not name an offered function.
TEST(ToolCallStream, TextThatIsNotACallIsContent) {
  const auto req = weather_request();
  for (const std::string text :
       {std::string("Use a < b and <tool or <|x when you like."), std::string(R"({"answer": 42})"),
        std::string(R"({"name": "launch_rockets", "arguments": {}})"),
        std::string("Sure.\n<tool_call>\n{\"name\": \"launch_rockets\", \"arguments\": {}}\n</tool_call>")})
    expect_matches_whole(req, text, text);
}

// A suffix that may open a call is held back, and released as soon as it cannot.
TEST(ToolCallStream, HoldsOnlyWhatMayOpenACall) {
  const auto req = weather_request();
  ToolCallStream ts(req, "c-");
  EXPECT_EQ(ts.update("Hello <tool", false).content, "Hello ");
  EXPECT_EQ(ts.update("Hello <tools are fun", false).content, "<tools are fun");
  EXPECT_EQ(ts.update("Hello <tools are fun <tool_call>\n{\"name\": \"get_ti", false).content, " ");
  EXPECT_TRUE(ts.update("Hello <tools are fun <tool_call>\n{\"name\": \"get_ti", false).tool_calls.empty())
      << "name incomplete";
  const auto d = ts.update("Hello <tools are fun <tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zo", false);
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0]["function"]["name"], "get_time");
  EXPECT_EQ(d.tool_calls[0]["function"]["arguments"], "{\"zo");
  EXPECT_TRUE(ts.opened_calls());
}

}  // namespace
}  // namespace tessera::server

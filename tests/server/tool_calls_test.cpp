// Tool-call replies parsed back into OpenAI's tool_calls (server/structured.h parse_tool_calls):
// the whole-text JSON call, Hermes <tool_call> blocks (several, with text before them), and
// Qwen3.5's XML functions with typed parameters, gpt-oss's harmony messages to functions;
// anything else stays content. Streamed (server/tool_stream.h): a reply fed in chunks of every
// size gives content and tool_calls deltas whose concatenations are what parse_tool_calls reads
// from the whole reply, and no marker of a call format ever reaches the content.
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
  r.tools.push_back({"get_weather", "", json::parse(R"({"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"}, "note": {"type": "string"}}})")});
  r.tools.push_back({"get_time", "", json::parse(R"({"type": "object", "properties": {"zone": {"type": "string"}}})")});
  return r;
}

json args_of(const json& call) { return json::parse(call["function"]["arguments"].get<std::string>()); }

TEST(ToolCalls, TheWholeTextAsOneJsonCall) {
  const auto req = weather_request();
  const json calls = parse_tool_calls(req, R"({"name": "get_time", "arguments": {"zone": "UTC"}})", "c-");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["id"], "c-0");
  EXPECT_EQ(calls[0]["function"]["name"], "get_time");
  EXPECT_EQ(args_of(calls[0]), json({{"zone", "UTC"}}));
}

TEST(ToolCalls, SeveralHermesBlocksWithTextBefore) {
  const auto req = weather_request();
  std::string before;
  const json calls = parse_tool_calls(req,
                                      "Let me check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
                                      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>\n",
                                      "c-", &before);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(before, "Let me check both.");
  EXPECT_EQ(calls[1]["id"], "c-1");
  EXPECT_EQ(args_of(calls[0]), json({{"city", "Oslo"}}));
  EXPECT_EQ(args_of(calls[1]), json({{"zone", "CET"}}));
}

TEST(ToolCalls, Qwen35XmlFunctionsWithTypedParameters) {
  const auto req = weather_request();
  const json calls = parse_tool_calls(req,
                                      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
                                      "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"metric\": true}\n</parameter>\n"
                                      "<parameter=note>\nline one\nline two\n</parameter>\n</function>\n</tool_call>",
                                      "c-");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(args_of(calls[0]),
            json({{"city", "San Francisco"}, {"days", 3}, {"opts", {{"metric", true}}}, {"note", "line one\nline two"}}));
  // A string-typed value stays a string even when it reads as JSON; a reply cut at the closing
  // tag (a stop string) still parses.
  const json unclosed = parse_tool_calls(req, "<tool_call>\n<function=get_time>\n<parameter=zone>\n42\n</parameter>\n</function>", "c-");
  ASSERT_EQ(unclosed.size(), 1u);
  EXPECT_EQ(args_of(unclosed[0]), json({{"zone", "42"}}));
}

// gpt-oss's harmony replies, as they reach the parser: the reasoning splitter has taken the
// analysis message and the first "<|start|>assistant"; <|call|> ends generation, so it is usually
// not in the text.
TEST(ToolCalls, HarmonyMessagesAddressedToFunctions) {
  const auto req = weather_request();
  std::string before = "stale";
  json calls = parse_tool_calls(
      req,
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Oslo\", \"days\": 2}",
      "h-", &before);
  ASSERT_EQ(calls.size(), 1u) << calls.dump();
  EXPECT_EQ(calls[0]["id"], "h-0");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(args_of(calls[0]), json({{"city", "Oslo"}, {"days", 2}}));
  EXPECT_EQ(before, "");

  // The recipient in the role header, a commentary preamble before it, <|call|> kept, and a
  // second call in a message of its own.
  calls = parse_tool_calls(
      req,
      "<|channel|>commentary<|message|>Checking both.<|end|>"
      "<|start|>assistant to=functions.get_time<|channel|>commentary json<|message|>{\"zone\": \"CET\"}<|call|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{\"city\": \"Rome\"}<|call|>",
      "h-", &before);
  ASSERT_EQ(calls.size(), 2u) << calls.dump();
  EXPECT_EQ(calls[0]["function"]["name"], "get_time");
  EXPECT_EQ(args_of(calls[0]), json({{"zone", "CET"}}));
  EXPECT_EQ(calls[1]["id"], "h-1");
  EXPECT_EQ(args_of(calls[1]), json({{"city", "Rome"}}));
  EXPECT_EQ(before, "Checking both.");

  // Not calls: a final answer, a function not offered, arguments that are not a JSON object.
  EXPECT_TRUE(parse_tool_calls(req, "<|channel|>final<|message|>It is sunny.", "h-").is_null());
  EXPECT_TRUE(
      parse_tool_calls(req, "<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{}", "h-").is_null());
  EXPECT_TRUE(parse_tool_calls(req, "<|channel|>commentary to=functions.get_time<|message|>[1, 2]", "h-").is_null());
  EXPECT_TRUE(
      parse_tool_calls(req, "<|channel|>commentary to=functions.get_time<|message|>{\"zone\": ", "h-").is_null())
      << "cut off mid-arguments";
}

TEST(ToolCalls, AnythingElseIsContent) {
  const auto req = weather_request();
  EXPECT_TRUE(parse_tool_calls(req, "Just an answer.", "c-").is_null());
  EXPECT_TRUE(parse_tool_calls(req, R"({"name": "rm_rf", "arguments": {}})", "c-").is_null()) << "not offered";
  EXPECT_TRUE(parse_tool_calls(req, "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>", "c-").is_null());
  EXPECT_TRUE(parse_tool_calls(req, "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call> and more", "c-").is_null())
      << "text after the calls";
  EXPECT_TRUE(parse_tool_calls(req, "<tool_call>not json</tool_call>", "c-").is_null());
  ParsedRequest no_tools;
  EXPECT_TRUE(parse_tool_calls(no_tools, R"({"name": "get_time", "arguments": {}})", "c-").is_null());
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
    if (max_chunk == 1) {  // a byte at a time: every call's arguments arrive in pieces
      EXPECT_GT(s.deltas, int(whole.size())) << "arguments arrive in more than one delta";
    }
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
  for (const std::string& text :
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

// Tool-call replies parsed back into OpenAI's tool_calls (server/structured.h parse_tool_calls):
// the whole-text JSON call, Hermes <tool_call> blocks (several, with text before them), and
// Qwen3.5's XML functions with typed parameters, gpt-oss's harmony messages to functions;
// anything else stays content.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/structured.h"

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

}  // namespace
}  // namespace tessera::server

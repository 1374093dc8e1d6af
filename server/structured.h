// Structured output on the OpenAI routes: response_format (json_object, json_schema with
// strict), Tessera's structured_outputs extension (json / regex / grammar, as vLLM names them),
// and tools with tool_choice. Requests become a Grammar (grammar/compiler.h) on the engine
// request; tool-call replies are parsed back into OpenAI's tool_calls. No I/O; any thread.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/context.h"
#include "server/request.h"

namespace tessera::server {

// Chat only, before the messages are rendered: reads tools and tool_choice. When tools are in
// play, a template with a tool section of its own gets them as its `tools` variable
// (out->tools_json); any other (SmolLM2's, most small models') gets a system turn in |messages|
// that describes them and the reply format (a JSON object {"name": ..., "arguments": {...}}).
std::optional<ApiError> prepare_tools(const Model& model, const nlohmann::json& body, nlohmann::json* messages,
                                      ParsedRequest* out);

// After prepare_tools: response_format / structured_outputs, or the grammar that tool_choice
// "required" or a named function implies, compiled into out->gen.grammar. Without XGrammar in
// the build any of them is a 400 that says why; an invalid schema, grammar or regex is a 400
// naming XGrammar's error.
std::optional<ApiError> prepare_grammar(ServerContext& ctx, const nlohmann::json& body, ParsedRequest* out);

// A reply of a request with tools, as OpenAI's tool_calls (null when the text is not a call of
// one of the offered functions: the reply is then ordinary content). |id_prefix| names the calls.
// Forms: the whole text one JSON call {"name", "arguments"}; or one or more <tool_call> blocks,
// each such a JSON call (Hermes, Qwen2.5/3) or an XML <function=NAME><parameter=P>value...
// (Qwen3-Coder, Qwen3.5), then nothing but whitespace; or gpt-oss's harmony messages addressed
// "to=functions.NAME" with JSON arguments. |before|: the text before the first block
// (the reply's content beside its calls), when given.
nlohmann::json parse_tool_calls(const ParsedRequest& req, const std::string& text, const std::string& id_prefix,
                                std::string* before = nullptr);

// The offered tool named |name|, or null.
const ToolSpec* offered_tool(const ParsedRequest& req, const std::string& name);
// The value of parameter |key| of an XML call (<parameter=KEY>value</parameter>): text, read as
// JSON where |tool|'s schema types the parameter as other than a string and it parses as such.
nlohmann::json xml_parameter_value(const ToolSpec& tool, const std::string& key, std::string value);

}  // namespace tessera::server

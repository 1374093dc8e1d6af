// Request parsing and validation: a JSON body of /v1/completions or /v1/chat/completions into a
// GenerationRequest, or an OpenAI-shaped error naming the field. No I/O; safe on any thread.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/sched/engine.h"
#include "server/context.h"
#include "server/reasoning.h"

namespace tessera::server {

// An error response: the status and the fields of OpenAI's {"error": {...}} object.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;
  std::string code;
  std::string type = "invalid_request_error";
};

// |o|[key] when |o| is an object holding a string there, else "". (json::value(key, "") throws
// when the member exists with another type: a client's {"type": {}} must be a 400, not a crash.)
inline std::string string_member(const nlohmann::json& o, const char* key) {
  if (!o.is_object()) return {};
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// One function a chat request offers (tools[i].function).
struct ToolSpec {
  std::string name, description;
  nlohmann::json parameters;  // its JSON Schema ({"type": "object"} when absent)
};

struct ParsedRequest {
  GenerationRequest gen;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool want_logprobs = false;  // completions: logprobs >= 0; chat: logprobs == true
  // Tools offered (empty: none, or tool_choice "none"); replies that call one become tool_calls.
  std::vector<ToolSpec> tools;
  std::string tool_choice;  // "auto", "required" or "named" (then tool_named); "" without tools
  std::string tool_named;
  // The tools for a chat template with a tool section of its own (else "": a system turn of
  // Tessera's describes them).
  std::string tools_json;
  // The reasoning split: the thinking tags when the reply is cut into reasoning_content and
  // content (chat only), and whether the rendered prompt opened the thinking block.
  std::optional<ThinkTags> think;
  bool think_inside = false;
};

// llama.cpp's LoRA list [{"id", "scale"}, ...] (a request's "lora" field, or the body of POST
// /lora-adapters) against the served |loras|: the one adapter it turns on in |*chosen| (-1:
// none) and that adapter's scale in |*scale|. An entry without "scale" has |missing_scale| (a
// request's list: 1; the global one: 0); scale 0 is off. Errors start with |where| ("lora: " or
// "") and name |param|.
std::optional<ApiError> choose_lora(const nlohmann::json& list, const std::vector<ServedLora>& loras,
                                    double missing_scale, const std::string& where, const std::string& param,
                                    int32_t* chosen, float* scale);

// Parses |raw| (the body) into |out| (whose |chat| says which route): every field type-checked
// and range-checked, the prompt rendered and tokenised, and the engine's own checks (context
// length) made. Returns the error to send, or nothing.
std::optional<ApiError> parse_request(ServerContext& ctx, const std::string& raw, ParsedRequest* out);

}  // namespace tessera::server

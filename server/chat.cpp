#include "server/chat.h"

#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "models/chat_template/chat_template.h"

namespace tessera::server {

using nlohmann::json;

namespace {

// OpenAI's roles ("developer" is its newer name for "system").
bool known_role(const std::string& r) {
  return r == "system" || r == "developer" || r == "user" || r == "assistant" || r == "tool";
}

// The text of messages[i].content: a string or an array of text parts.
std::optional<ApiError> read_content(const json& m, const std::string& where, std::string* content) {
  const json& c = m.contains("content") ? m["content"] : json();
  if (c.is_string()) {
    *content = c.get<std::string>();
    return std::nullopt;
  }
  if (c.is_array()) {
    for (const auto& part : c) {
      if (!part.is_object() || string_member(part, "type") != "text" || !part.contains("text") || !part["text"].is_string())
        return ApiError{400, "'" + where + ".content' parts must be {\"type\": \"text\", \"text\": string}", where + ".content"};
      *content += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  if (c.is_null() && string_member(m, "role") == "assistant" && m.contains("tool_calls")) {
    // An earlier call, written back as the model was told to write it (server/structured.cpp).
    const json& calls = m["tool_calls"];
    if (!calls.is_array()) return ApiError{400, "'" + where + ".tool_calls' must be an array", where + ".tool_calls"};
    for (const auto& call : calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object() || !call["function"].contains("name"))
        return ApiError{400, "'" + where + ".tool_calls' entries must be {\"function\": {\"name\", \"arguments\"}}", where + ".tool_calls"};
      const json& f = call["function"];
      json args = f.contains("arguments") && f["arguments"].is_string() ? json::parse(f["arguments"].get<std::string>(), nullptr, false)
                                                                         : f.value("arguments", json::object());
      if (args.is_discarded()) args = f["arguments"];
      if (!content->empty()) *content += "\n";
      *content += json{{"name", f["name"]}, {"arguments", args}}.dump();
    }
    return std::nullopt;
  }
  if (c.is_null() && string_member(m, "role") == "assistant" && m.contains("function_call"))
    return ApiError{400, "'" + where + "': function_call is not supported by this server (use tool_calls)", where + ".function_call"};
  if (c.is_null())
    return ApiError{400, "'" + where + ".content' is required (a string or an array of text parts)", where + ".content"};
  return ApiError{400, "'" + where + ".content' must be a string or an array of text parts, got " + std::string(c.type_name()),
                  where + ".content"};
}

std::optional<ApiError> read_turns(const json& messages, std::vector<ChatMessage>* turns) {
  if (!messages.is_array() || messages.empty()) return ApiError{400, "'messages' must be a non-empty array", "messages"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return ApiError{400, "'" + where + "' must be an object with a string 'role'", where};
    const std::string role = m["role"].get<std::string>();
    if (!known_role(role))
      return ApiError{400, "'" + where + ".role' is '" + role + "'; expected system, developer, user, assistant or tool", where + ".role"};
    std::string content;
    if (auto e = read_content(m, where, &content)) return e;
    turns->push_back({role, std::move(content)});
  }
  return std::nullopt;
}

// "\uE000<i>\uE001": private-use code points no template writes.
std::string sentinel(size_t i) { return "\xEE\x80\x80" + std::to_string(i) + "\xEE\x80\x81"; }

std::string trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// Splits |with_sentinels| (the template's output for sentinel contents) at the sentinels and
// puts the contents back, recording their ranges; false when a sentinel is not there exactly
// once, in order. |trim|: the template trims content (as Llama 3's does).
bool splice(const std::string& with_sentinels, const std::vector<ChatMessage>& turns, bool trim, RenderedChat* out) {
  out->text.clear();
  out->literal.clear();
  size_t pos = 0;
  for (size_t i = 0; i < turns.size(); ++i) {
    const std::string s = sentinel(i);
    const size_t at = with_sentinels.find(s, pos);
    if (at == std::string::npos || with_sentinels.find(s, at + s.size()) != std::string::npos) return false;
    out->text.append(with_sentinels, pos, at - pos);
    const std::string content = trim ? trimmed(turns[i].content) : turns[i].content;
    out->literal.push_back({out->text.size(), out->text.size() + content.size()});
    out->text += content;
    pos = at + s.size();
  }
  out->text.append(with_sentinels, pos, std::string::npos);
  return true;
}

}  // namespace

std::optional<ApiError> render_chat(const Model& model, const json& messages, RenderedChat* out, const std::string& tools_json,
                                    const std::string& kwargs_json) {
  std::vector<ChatMessage> turns;
  if (auto e = read_turns(messages, &turns)) return e;
  if (model.chat_template().empty()) {
    for (const auto& t : turns) {
      out->literal.push_back({out->text.size(), out->text.size() + t.content.size()});
      out->text += t.content;
    }
    return std::nullopt;
  }
  auto tpl = ChatTemplate::parse(model.chat_template());
  if (!tpl.ok()) return ApiError{500, "the model's chat template: " + tpl.status().message(), "", "", "server_error"};
  const Tokenizer& tok = model.tokenizer();
  std::map<std::string, std::string> extra;
  if (tok.bos() >= 0) extra["bos_token"] = tok.token_to_piece(tok.bos());
  if (tok.eos() >= 0) extra["eos_token"] = tok.token_to_piece(tok.eos());
  auto rendered = tpl->render(turns, /*add_generation_prompt=*/true, extra, tools_json, kwargs_json);
  if (!rendered.ok()) return ApiError{400, "chat template: " + rendered.status().message(), "messages"};
  // The same template over sentinel contents shows where the contents go; the spliced text must
  // be exactly the real rendering (so the template did nothing to the content but place it).
  std::vector<ChatMessage> marked = turns;
  for (size_t i = 0; i < marked.size(); ++i) marked[i].content = sentinel(i);
  auto with_sentinels = tpl->render(marked, /*add_generation_prompt=*/true, extra, tools_json, kwargs_json);
  if (with_sentinels.ok()) {
    for (bool trim : {false, true})
      if (splice(*with_sentinels, turns, trim, out) && out->text == *rendered) return std::nullopt;
  }
  // The template transforms content: keep its rendering, and refuse only what could forge a
  // marker (content holding a control token's text).
  for (size_t i = 0; i < turns.size(); ++i) {
    for (int32_t id : tok.encode(turns[i].content, false, true))
      if (tok.is_control(id))
        return ApiError{400, "'messages[" + std::to_string(i) + "].content' holds the control token '" + tok.token_to_piece(id) +
                                 "', which this model's template cannot keep apart from its own markers",
                        "messages[" + std::to_string(i) + "].content"};
  }
  out->text = std::move(rendered).value();
  out->literal.clear();
  return std::nullopt;
}

}  // namespace tessera::server

#include "server/chat.h"

#include <map>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "models/chat_template/chat_template.h"

namespace tessera::server {

using nlohmann::json;

namespace {

Result<std::string> apply_template(const Model& m, const std::vector<std::pair<std::string, std::string>>& turns) {
  if (m.chat_template().empty()) {
    std::string raw;
    for (const auto& t : turns) raw += t.second;
    return raw;
  }
  TS_ASSIGN_OR_RETURN(auto tpl, ChatTemplate::parse(m.chat_template()));
  std::vector<ChatMessage> msgs;
  for (const auto& [role, content] : turns) msgs.push_back({role, content});
  const Tokenizer& tok = m.tokenizer();
  std::map<std::string, std::string> extra;
  if (tok.bos() >= 0) extra["bos_token"] = tok.token_to_piece(tok.bos());
  if (tok.eos() >= 0) extra["eos_token"] = tok.token_to_piece(tok.eos());
  return tpl.render(msgs, /*add_generation_prompt=*/true, extra);
}

}  // namespace

std::optional<ApiError> render_chat(const Model& model, const json& messages, std::string* text) {
  if (!messages.is_array() || messages.empty())
    return ApiError{400, "'messages' must be a non-empty array", "messages"};
  std::vector<std::pair<std::string, std::string>> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return ApiError{400, "'" + where + "' must be an object with a string 'role'", where};
    std::string content;
    const json& c = m.contains("content") ? m["content"] : json();
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {  // content parts: only text parts
      for (const auto& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          return ApiError{400, "'" + where + ".content' parts must be {\"type\": \"text\", \"text\": string}", where + ".content"};
        content += part["text"].get<std::string>();
      }
    } else if (!c.is_null()) {
      return ApiError{400, "'" + where + ".content' must be a string or an array of text parts", where + ".content"};
    }
    turns.emplace_back(m["role"].get<std::string>(), std::move(content));
  }
  auto rendered = apply_template(model, turns);
  if (!rendered.ok()) return ApiError{400, "chat template: " + rendered.status().message(), "messages"};
  *text = std::move(rendered).value();
  return std::nullopt;
}

}  // namespace tessera::server

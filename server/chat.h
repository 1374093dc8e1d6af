// Chat messages (the JSON array of /v1/chat/completions) into prompt text through the model's
// own chat template, with the byte ranges that came from the messages' content.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "models/model.h"
#include "server/request.h"

namespace tessera::server {

struct RenderedChat {
  std::string text;
  // Where each message's content lies in |text|: tokenised with control tokens off there, so a
  // client cannot forge the template's markers (e.g. "<|im_end|>" to start a system turn).
  std::vector<TextRange> literal;
};

// Validates |messages| (objects with a known role and string or text-part content) and renders
// them with the model's chat template (models/chat_template; a model without one gets the
// contents concatenated). A template that raises (e.g. roles out of order) is the client's
// error: 400 naming the template's message.
// |tools_json|: OpenAI's tools array for a template with a tool section (ChatTemplate::uses_tools).
// |kwargs_json|: more template variables (a JSON object: vLLM's chat_template_kwargs).
std::optional<ApiError> render_chat(const Model& model, const nlohmann::json& messages, RenderedChat* out,
                                    const std::string& tools_json = {}, const std::string& kwargs_json = {});

}  // namespace tessera::server

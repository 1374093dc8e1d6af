// Chat messages (the JSON array of /v1/chat/completions) into prompt text through the model's
// own chat template.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "models/model.h"
#include "server/request.h"

namespace tessera::server {

// Renders |messages| with the model's chat template (models/chat_template; a model without one
// gets the turns concatenated). A template that raises (e.g. roles out of order) is the client's
// error: 400 naming the template's message.
std::optional<ApiError> render_chat(const Model& model, const nlohmann::json& messages, std::string* text);

}  // namespace tessera::server

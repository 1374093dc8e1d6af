// OpenAI-shaped error responses ({"error": {"message", "type", "param", "code"}}).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "server/context.h"
#include "server/request.h"

namespace httplib { struct Response; }

namespace tessera::server {

// Generated text may hold invalid UTF-8 (a random model, a token split mid-character at a stop):
// replace it rather than let the JSON library throw.
inline std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// Writes |e| into |res| and counts it in /metrics.
void send_error(ServerContext& ctx, httplib::Response& res, const ApiError& e);

}  // namespace tessera::server

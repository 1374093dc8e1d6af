// The route table of `tessera serve`: /health, /metrics, /v1/models, /v1/completions and
// /v1/chat/completions, plus OpenAI-shaped answers for unknown routes and handler exceptions.
#pragma once
#include "server/context.h"

namespace httplib { class Server; }

namespace tessera::server {

void register_routes(httplib::Server& svr, ServerContext& ctx);

}  // namespace tessera::server

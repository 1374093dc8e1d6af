// Who may call the server: the API key (Authorization: Bearer, as OpenAI, vLLM and llama-server
// take it) and browser origins (CORS). Checked once per request, before its body is read.
#pragma once
#include <httplib.h>

#include "server/context.h"

namespace tessera::server {

// Unhandled: the request may proceed (CORS headers for an allowed origin are already on |res|).
// Handled: |res| holds the answer: a CORS preflight's 204, or a 401/403 OpenAI-shaped error.
// - With an api_key, every route but GET /health needs "Authorization: Bearer <key>".
// - A request carrying an Origin header (a browser's) is refused unless the origin is in
//   allowed_origins (or that holds "*"): without it a cross-site page could still make the
//   browser POST a completion (a "simple" request needs no preflight), only not read it.
httplib::Server::HandlerResponse check_access(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);

}  // namespace tessera::server

// The engine bridge: a parsed request submitted to the EngineThread, its token events (on the
// engine thread: they only format and queue text, never block on the network) turned into a
// JSON response or a stream of server-sent events written by the HTTP handler.
#pragma once
#include "server/context.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace tessera::server {

// POST /v1/completions (|chat| false) and /v1/chat/completions (true).
void handle_generate(ServerContext& ctx, bool chat, const httplib::Request& hreq, httplib::Response& res);

}  // namespace tessera::server

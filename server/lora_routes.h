// The LoRA adapter routes of `tessera serve` (docs/lora.md): llama.cpp's GET /lora-adapters, and
// vLLM's run-time POST /v1/load_lora_adapter and /v1/unload_lora_adapter (only with
// --allow-runtime-lora-updates), plus the adapters' entries in /v1/models. Loads and unloads run
// on the engine thread between two steps (EngineThread::call), so nothing running is disturbed;
// handlers read the server's own list (ServerContext::loras), never the Model's.
#pragma once
#include <nlohmann/json.hpp>

#include "server/context.h"

namespace httplib {
class Server;
}

namespace tessera::server {

void add_lora_routes(httplib::Server& svr, ServerContext& ctx);

// /v1/models entries of the served adapters, as vLLM lists them: the adapter's name as id, its
// path as root, the base model as parent.
std::vector<nlohmann::json> lora_model_entries(const ServerContext& ctx);

}  // namespace tessera::server

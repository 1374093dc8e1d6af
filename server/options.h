// What `tessera serve` is told on its command line about the HTTP side (the model, KV cache and
// scheduler are the caller's).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace tessera::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model_name;        // the id in /v1/models (default: the file's stem)
  int max_in_flight = 64;        // requests admitted at once; more are answered 429
  // Connections served at once (each holds a worker thread); more are answered 503 and closed.
  int max_connections = 512;
  int listen_backlog = 1024;     // connections the kernel queues before accept (capped by somaxconn)
  double header_timeout_s = 10;  // the request line and headers must arrive within this
  double body_timeout_s = 60;    // and the body within this after the headers
  double keep_alive_timeout_s = 5;  // an idle keep-alive connection is closed after this
  size_t max_body_bytes = size_t(16) << 20;  // larger bodies get 413
  double shutdown_grace_s = 30;  // after SIGTERM, requests in flight get this long to finish
  std::string api_key;           // non-empty: every route but /health needs "Authorization: Bearer <key>"
  std::vector<std::string> allowed_origins;  // CORS: browser origins allowed ("*": any); none by default
  // Tokenise special-token text inside chat messages as control tokens (the behaviour before
  // messages were tokenised as plain text; lets a client forge turns).
  bool parse_special_in_messages = false;
  // The reasoning split (server/reasoning.h): "auto" (when the chat template writes <think>
  // tags), "deepseek" (always cut at <think> ... </think>) or "none" (thoughts stay in content).
  std::string reasoning_format = "auto";
  // Reasoning tokens before the close tag is forced (-1: unlimited; 0: thinking off, as the
  // template's enable_thinking=false). A request's "reasoning_budget" overrides it.
  int reasoning_budget = -1;
  // LoRA (docs/lora.md): POST /v1/load_lora_adapter and /v1/unload_lora_adapter answer only with
  // this on (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING); the limits apply to every load.
  bool allow_runtime_lora_updates = false;
  int max_loras = 0;      // device slots: adapters one step may use (0: one per loaded adapter)
  int max_lora_rank = 0;  // the highest rank accepted (0: no limit)
  int max_cpu_loras = 0;  // adapters loaded at once, in host memory (0: max_loras)
};

}  // namespace tessera::server

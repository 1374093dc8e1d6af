// POST /v1/embeddings: OpenAI's request (input: a string, an array of strings, an array of token
// ids or an array of such arrays; encoding_format float or base64) run through the engine as
// embedding requests (prefill only, one step each, KV freed at once), and OpenAI's response
// ({"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "usage"}).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "server/context.h"
#include "server/request.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace tessera::server {

struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;  // tokenised, one per output embedding
  bool base64 = false;
};

// Parses and validates |raw| (no I/O): the model name, the inputs (tokenised with the model's
// special tokens: [CLS] ... [SEP] for BERT), encoding_format and dimensions. A model that cannot
// embed is a 400 naming why. Returns the error to send, or nothing.
std::optional<ApiError> parse_embedding_request(ServerContext& ctx, const std::string& raw, EmbeddingRequest* out);

// Little-endian float32 bytes in base64 (OpenAI's encoding_format "base64").
std::string base64_floats(const std::vector<float>& v);

void handle_embeddings(ServerContext& ctx, const httplib::Request& hreq, httplib::Response& res);

}  // namespace tessera::server

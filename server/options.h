// What `tessera serve` is told on its command line about the HTTP side (the model, KV cache and
// scheduler are the caller's).
#pragma once
#include <string>

namespace tessera::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string model_name;        // the id in /v1/models (default: the file's stem)
  int max_in_flight = 64;        // requests admitted at once; more are answered 429
  int http_threads = 0;          // 0: max_in_flight + 8
};

}  // namespace tessera::server

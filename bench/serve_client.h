// The client side of `tessera-bench serve`: a `tessera serve` child process on a loopback port,
// and one streamed /v1/completions request with a timestamp per token as the client sees it.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "core/status.h"

namespace tessera::bench {

using Clock = std::chrono::steady_clock;

// A `tessera serve` started by the bench (`--port 0`: it prints the port it got). SIGTERM on
// stop() or destruction, which lets it finish what is in flight and exit.
class ServerProcess {
 public:
  // Runs |binary| serve -m |model| --host 127.0.0.1 --port 0 |extra_args|...; waits (up to
  // |start_timeout_s|) for its "listening on HOST:PORT" line.
  static Result<std::unique_ptr<ServerProcess>> start(const std::string& binary, const std::string& model,
                                                      const std::vector<std::string>& extra_args,
                                                      double start_timeout_s = 300);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& host() const { return host_; }
  int port() const { return port_; }
  // Stops the server (SIGTERM, then SIGKILL after 30 s); returns its exit status (-1 if killed).
  int stop();

 private:
  ServerProcess() = default;
  pid_t pid_ = -1;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
};

// One streamed completion request.
struct StreamRequest {
  std::vector<int32_t> prompt;   // token ids (the bench's prompts are random ids)
  int32_t max_tokens = 64;
  bool ignore_eos = true;        // fixed output lengths (a vLLM-style extension tessera serve has)
  double temperature = 0.0;
  uint64_t seed = 0;
  std::string model;             // empty: the server's own
  // >= 0: run under LoRA adapter |lora| in llama.cpp's dialect ("lora": [{"id", "scale": 1}]),
  // which tessera serve and llama-server both speak.
  int lora = -1;
};

struct StreamResult {
  bool ok = false;
  std::string error;             // why not ok (HTTP status and body, transport error)
  Clock::time_point sent;
  std::vector<Clock::time_point> token_times;  // arrival of each output token (client side)
  std::string text;
  std::vector<std::string> tokens;  // each token's text (per-token logprobs; per chunk when counted_by_text)
  int32_t prompt_tokens = 0;     // from the final usage chunk
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;     // prompt_tokens_details.cached_tokens
  std::string finish_reason;
  bool aborted = false;          // the caller's stop flag ended the stream (the server cancels)
  // No per-token logprobs in the stream (llama-server): token_times holds one entry per chunk
  // with text, and tpot_ms() divides by usage's completion_tokens instead.
  bool counted_by_text = false;

  double ttft_ms() const;
  double e2e_ms() const;         // send -> last token
  double tpot_ms() const;        // (e2e - ttft) / (tokens - 1); 0 with fewer than 2 tokens
  std::vector<double> itl_ms() const;  // gaps between consecutive tokens
};

// Posts |req| to http://host:port/v1/completions with stream=true and reads the SSE stream to
// its end. A non-null |stop| that becomes true ends the stream early (the client disconnects;
// the result is marked aborted and still ok). A non-null |progress| counts the tokens received
// so far (for a scenario that waits until streams are under way).
StreamResult stream_completion(const std::string& host, int port, const StreamRequest& req,
                               const std::atomic<bool>* stop = nullptr, std::atomic<int>* progress = nullptr,
                               double timeout_s = 1800);

// Parses "http://host:port" (a path after it is ignored).
Status parse_url(const std::string& url, std::string* host, int* port);

}  // namespace tessera::bench

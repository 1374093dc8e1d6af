#include "bench/serve_client.h"

#include <algorithm>

#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

namespace tessera::bench {

using nlohmann::json;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Reads one line from |fd| within |timeout_s|; false on EOF or timeout.
bool read_line(int fd, double timeout_s, std::string* line) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  line->clear();
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int left_ms = int(std::chrono::duration<double, std::milli>(deadline - Clock::now()).count()) + 1;
    if (poll(&p, 1, left_ms) <= 0) continue;
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<ServerProcess>> ServerProcess::start(const std::string& binary, const std::string& model,
                                                            const std::vector<std::string>& extra_args,
                                                            double start_timeout_s) {
  if (access(binary.c_str(), X_OK) != 0)
    return InvalidArgument("tessera-bench serve: server binary '" + binary + "' is not executable (--server-bin)");
  std::vector<std::string> args = {binary, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  int fds[2];
  if (pipe(fds) != 0) return Unavailable(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) return Unavailable(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<ServerProcess> p(new ServerProcess());
  p->pid_ = pid;
  std::string line;
  const bool got = read_line(fds[0], start_timeout_s, &line);
  close(fds[0]);  // the server prints nothing else on stdout (and ignores SIGPIPE)
  int port = 0;
  char host[64] = {0};
  if (!got || std::sscanf(line.c_str(), "listening on %63[^:]:%d", host, &port) != 2) {
    p->stop();
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    return Unavailable("tessera-bench serve: the server did not start (" + cmd + "): got '" + line + "'");
  }
  p->host_ = host;
  p->port_ = port;
  return p;
}

int ServerProcess::stop() {
  if (pid_ <= 0) return 0;
  kill(pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 300; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

ServerProcess::~ServerProcess() { stop(); }

double StreamResult::ttft_ms() const { return token_times.empty() ? 0.0 : ms_between(sent, token_times.front()); }
double StreamResult::e2e_ms() const { return token_times.empty() ? 0.0 : ms_between(sent, token_times.back()); }
double StreamResult::tpot_ms() const {
  const size_t n = counted_by_text ? std::max(size_t(std::max(completion_tokens, 0)), token_times.size()) : token_times.size();
  if (token_times.size() < 2 || n < 2) return 0.0;
  return ms_between(token_times.front(), token_times.back()) / double(n - 1);
}
std::vector<double> StreamResult::itl_ms() const {
  std::vector<double> out;
  for (size_t i = 1; i < token_times.size(); ++i) out.push_back(ms_between(token_times[i - 1], token_times[i]));
  return out;
}

namespace {

// Chunks with text, kept aside: they count as tokens only if the stream has no per-token
// logprobs at all (a server that has them may also send chunks that carry none).
struct TextChunks {
  std::vector<Clock::time_point> times;
  std::vector<std::string> texts;
};

// Handles one SSE event's data; false when the stream reported an error.
bool on_sse_data(const std::string& data, StreamResult* r, TextChunks* text) {
  if (data == "[DONE]") return true;
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded()) {
    r->error = "unparsable SSE data: " + data.substr(0, 200);
    return false;
  }
  if (j.contains("error")) {
    r->error = "server error: " + j["error"].dump();
    return false;
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    r->prompt_tokens = u.value("prompt_tokens", 0);
    r->completion_tokens = u.value("completion_tokens", 0);
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
      r->cached_tokens = u["prompt_tokens_details"].value("cached_tokens", 0);
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return true;
  const json& c = j["choices"][0];
  const auto now = Clock::now();
  if (c.contains("text") && c["text"].is_string()) r->text += c["text"].get<std::string>();
  // Token arrivals. The request asks for logprobs, so a server that honours it (tessera serve,
  // vLLM, OpenAI) sends one entry per token, even for a token whose text is held back (an
  // incomplete UTF-8 sequence): `logprobs.tokens` (completions) or `logprobs.content` (the
  // chat-style shape). A server that answers `"logprobs": null` (llama-server) is counted one
  // token per chunk: llama-server sends one per token, with empty text while a UTF-8 sequence is
  // held back, and then a last chunk with empty text that only carries finish_reason (and
  // usage), which is no token; usage then says how many tokens there were (counted_by_text).
  const json* lp = c.contains("logprobs") && c["logprobs"].is_object() ? &c["logprobs"] : nullptr;
  if (lp && lp->contains("tokens") && (*lp)["tokens"].is_array()) {
    for (const auto& t : (*lp)["tokens"]) {
      r->tokens.push_back(t.is_string() ? t.get<std::string>() : std::string());
      r->token_times.push_back(now);
    }
  } else if (lp && lp->contains("content") && (*lp)["content"].is_array()) {
    for (const auto& t : (*lp)["content"]) {
      r->tokens.push_back(t.is_object() && t.contains("token") && t["token"].is_string() ? t["token"].get<std::string>()
                                                                                          : std::string());
      r->token_times.push_back(now);
    }
  } else if (c.contains("text") && c["text"].is_string() &&
             (!c["text"].get<std::string>().empty() || !c.contains("finish_reason") || c["finish_reason"].is_null())) {
    text->texts.push_back(c["text"].get<std::string>());
    text->times.push_back(now);
  }
  if (c.contains("finish_reason") && c["finish_reason"].is_string()) r->finish_reason = c["finish_reason"];
  return true;
}

}  // namespace

StreamResult stream_completion(const std::string& host, int port, const StreamRequest& req, const std::atomic<bool>* stop,
                               std::atomic<int>* progress, double timeout_s) {
  StreamResult r;
  json body = {{"prompt", req.prompt},   {"max_tokens", req.max_tokens}, {"temperature", req.temperature},
               {"seed", req.seed},       {"stream", true},               {"stream_options", {{"include_usage", true}}},
               {"logprobs", 0},          {"ignore_eos", req.ignore_eos}};
  if (!req.model.empty()) body["model"] = req.model;
  if (req.lora >= 0) body["lora"] = json::array({{{"id", req.lora}, {"scale", 1.0}}});
  httplib::Client cli(host, port);
  cli.set_connection_timeout(10);
  cli.set_read_timeout(time_t(timeout_s));
  cli.set_write_timeout(60);
  std::string pending;      // bytes of an SSE event not yet complete
  std::string raw_error;    // the body of a non-200 answer
  TextChunks text;          // chunks with text (the tokens when no chunk has logprobs)
  int status = 0;
  bool bad = false;
  httplib::Request hreq;
  hreq.method = "POST";
  hreq.path = "/v1/completions";
  hreq.body = body.dump();
  hreq.set_header("Content-Type", "application/json");
  hreq.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  hreq.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      raw_error.append(data, n);
      return true;
    }
    pending.append(data, n);
    size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0 && !on_sse_data(event.substr(6), &r, &text)) bad = true;
    }
    if (progress) progress->store(int(std::max(r.token_times.size(), text.times.size())));
    if (stop && stop->load()) {
      r.aborted = true;
      return false;
    }
    return !bad;
  };
  r.sent = Clock::now();
  const auto res = cli.send(hreq);
  if (r.aborted) {
    r.ok = true;
    return r;
  }
  if (!res) {
    if (r.error.empty()) r.error = "transport error: " + httplib::to_string(res.error());
    return r;
  }
  if (status != 200) {
    r.error = "HTTP " + std::to_string(status) + ": " + raw_error.substr(0, 400);
    return r;
  }
  if (bad) return r;
  if (r.token_times.empty() && !text.times.empty()) {
    r.counted_by_text = true;
    r.token_times = std::move(text.times);
    r.tokens = std::move(text.texts);
  }
  // Counted by text: a chunk may carry several tokens (text held back, then flushed together),
  // never fewer than one, so usage may exceed the chunks but not fall short of them.
  const int32_t chunks = int32_t(r.token_times.size());
  if (r.counted_by_text ? r.completion_tokens < chunks : r.completion_tokens != chunks) {
    r.error = "the stream carried " + std::to_string(r.token_times.size()) + " tokens but usage says " +
              std::to_string(r.completion_tokens);
    return r;
  }
  r.ok = true;
  return r;
}

Status parse_url(const std::string& url, std::string* host, int* port) {
  std::string s = url;
  if (s.rfind("http://", 0) == 0) s = s.substr(7);
  else if (s.find("://") != std::string::npos)
    return InvalidArgument("--url '" + url + "': only http:// is supported");
  s = s.substr(0, s.find('/'));
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0) return InvalidArgument("--url '" + url + "': expected http://HOST:PORT");
  *host = s.substr(0, colon);
  char* end = nullptr;
  const long p = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p <= 0 || p > 65535) return InvalidArgument("--url '" + url + "': bad port");
  *port = int(p);
  return Status();
}

}  // namespace tessera::bench

#include "server/bridge.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <vector>
#include <nlohmann/json.hpp>

#include "server/errors.h"
#include "server/http.h"
#include "server/request.h"
#include "server/reasoning.h"
#include "server/structured.h"
#include "server/tool_stream.h"

namespace tessera::server {

using nlohmann::json;

namespace {

// ---------------------------------------------------------------------------------------------
// One request in flight: filled by engine-thread callbacks, read by the HTTP handler.

struct ChoiceState {
  std::string text;                // everything generated
  std::string reasoning, content;  // |text| cut by the reasoning split (content = text without one)
  std::optional<ReasoningSplitter> splitter;
  std::optional<ToolCallStream> tools;  // a streamed request with tools: its calls as deltas
  json logprobs = json::array();  // chat: content entries; completions: parallel arrays below
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
  int32_t n_tokens = 0;
  bool started = false;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  std::chrono::steady_clock::time_point last_token;  // for the inter-token gaps
  std::vector<double> itl_s;  // gaps between its tokens, moved into the histogram when it finishes
};

struct RequestState {
  ServerContext* ctx = nullptr;
  ParsedRequest req;
  std::string id;  // "chatcmpl-N" / "cmpl-N"
  int64_t created = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ChoiceState> choices;
  int n_finished = 0;
  int32_t cached_tokens = 0;
  std::deque<std::string> events;  // streaming: SSE events ready to write
  bool done = false;
  uint64_t stats_version = 0;  // the engine's stats show this request finished from this version on
};

// OpenAI's finish reasons, plus vLLM's "abort" for a request the server cut short (the end of
// the shutdown grace period). A client's own cancel (a disconnect) has no one to read it.
const char* finish_text(FinishReason r) {
  if (r == FinishReason::kLength) return "length";
  if (r == FinishReason::kCancelled) return "abort";
  if (r == FinishReason::kGrammarDeadEnd) return "grammar_dead_end";  // the grammar allowed no next token
  return "stop";
}

json usage_of(const RequestState& st) {
  int32_t completion = 0;
  for (const auto& c : st.choices) completion += c.n_tokens;
  const int32_t prompt = int32_t(st.req.gen.prompt.size());
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", st.cached_tokens}}}};
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

// Records one token's log-probabilities in the shape of the endpoint.
void add_logprobs(const Model& model, RequestState& st, ChoiceState& c, const TokenEvent& ev) {
  const Tokenizer& tok = model.tokenizer();
  const std::string piece = tok.token_to_piece(ev.token);
  if (st.req.chat) {
    json top = json::array();
    for (const auto& t : ev.top_logprobs) {
      const std::string p = tok.token_to_piece(t.token);
      top.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", bytes_of(p)}});
    }
    c.logprobs.push_back({{"token", piece}, {"logprob", ev.logprob}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
  } else {
    json top = json::object();
    for (const auto& t : ev.top_logprobs) top[tok.token_to_piece(t.token)] = t.logprob;
    c.text_offset.push_back(c.text.size());
    c.tokens.push_back(piece);
    c.token_logprobs.push_back(ev.logprob);
    c.top_logprobs.push_back(top);
  }
}

json choice_logprobs(const RequestState& st, const ChoiceState& c) {
  if (!st.req.want_logprobs) return nullptr;
  if (st.req.chat) return {{"content", c.logprobs}};
  return {{"tokens", c.tokens}, {"token_logprobs", c.token_logprobs}, {"top_logprobs", c.top_logprobs}, {"text_offset", c.text_offset}};
}

// One streamed chunk of choice |index| (chat: with |reasoning| as reasoning_content when not empty).
std::string sse_chunk(const RequestState& st, int index, const std::string& text, const json& logprobs, const char* finish,
                      bool first, const std::string& reasoning = {}) {
  json choice = {{"index", index}, {"finish_reason", finish ? json(finish) : json(nullptr)}, {"logprobs", logprobs}};
  if (st.req.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
    if (!text.empty() || (first && reasoning.empty())) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  json chunk = {{"id", st.id}, {"object", st.req.chat ? "chat.completion.chunk" : "text_completion"}, {"created", st.created},
                {"model", st.ctx->opts.model_name}, {"choices", json::array({choice})}};
  return "data: " + dump(chunk) + "\n\n";
}

// Tool-call deltas of choice |index| (ToolCallStream: each names its call's index).
std::string sse_tool_chunk(const RequestState& st, int index, const json& calls) {
  json delta = {{"tool_calls", calls}};
  json choice = {{"index", index}, {"finish_reason", nullptr}, {"logprobs", nullptr}, {"delta", delta}};
  json chunk = {{"id", st.id}, {"object", "chat.completion.chunk"}, {"created", st.created},
                {"model", st.ctx->opts.model_name}, {"choices", json::array({choice})}};
  return "data: " + dump(chunk) + "\n\n";
}

void record_metrics(ServerContext& ctx, const TokenEvent& ev) {
  std::lock_guard<std::mutex> lock(ctx.mu);
  ++ctx.finished[ev.finish == FinishReason::kCancelled ? "cancelled" : ev.finish == FinishReason::kError ? "error" : finish_text(ev.finish)];
  if (!ev.metrics || ev.index != 0) return;
  const RequestMetrics& m = *ev.metrics;
  if (m.generated_tokens > 0) {
    ctx.ttft_sum_s += m.ttft_ms / 1e3;
    ++ctx.ttft_count;
    ctx.ttft_hist.observe(m.ttft_ms / 1e3);
  }
  if (m.generated_tokens > 1) { ctx.tpot_sum_s += m.tpot_ms / 1e3; ++ctx.tpot_count; }
  ctx.e2e_sum_s += m.e2e_ms / 1e3;
  ++ctx.e2e_count;
  ctx.e2e_hist.observe(m.e2e_ms / 1e3);
  ctx.cached_prompt_tokens += m.cached_tokens;
  ctx.prompt_tokens += m.prompt_tokens;
}

// A token of choice |c|: its gap since the previous one, and its logprobs; returns the logprobs
// entry a streamed chunk carries (null when none).
json note_token(RequestState& st, ChoiceState& c, const TokenEvent& ev) {
  json lp = nullptr;
  if (ev.token < 0) return lp;
  const auto now = std::chrono::steady_clock::now();
  if (c.n_tokens > 0) c.itl_s.push_back(std::chrono::duration<double>(now - c.last_token).count());
  c.last_token = now;
  ++c.n_tokens;
  if (!st.req.want_logprobs) return lp;
  const size_t before = st.req.chat ? c.logprobs.size() : c.tokens.size();
  add_logprobs(*st.ctx->model, st, c, ev);
  if (!st.req.stream) return lp;
  if (st.req.chat) return {{"content", json::array({c.logprobs[before]})}};
  return {{"tokens", {c.tokens[before]}},
          {"token_logprobs", {c.token_logprobs[before]}},
          {"top_logprobs", {c.top_logprobs[before]}},
          {"text_offset", {c.text_offset[before]}}};
}

// Choice |c| finished with |ev|: its last streamed events, and when it is the request's last
// choice, the usage chunk and the request's end.
void queue_finish(RequestState& st, ChoiceState& c, const TokenEvent& ev, bool tool_stream) {
  if (st.req.stream) {
    if (ev.finish == FinishReason::kError) {
      json err = {{"error", {{"message", ev.error}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}};
      st.events.push_back("data: " + dump(err) + "\n\n");
    } else if (tool_stream) {
      // A reply that opened calls and stopped by itself ends as one (as vLLM's streams do, also
      // when the model's arguments turn out not to be valid JSON; a reply cut by the length
      // limit says so).
      const bool called = c.tools->opened_calls() && ev.finish == FinishReason::kStop;
      st.events.push_back(sse_chunk(st, ev.index, "", nullptr, called ? "tool_calls" : finish_text(ev.finish), false));
    } else {
      st.events.push_back(sse_chunk(st, ev.index, "", nullptr, finish_text(ev.finish), !c.started));
    }
  }
  if (++st.n_finished < int(st.choices.size())) return;
  if (st.req.stream && st.req.include_usage) {
    json chunk = {{"id", st.id},
                  {"object", st.req.chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", st.created},
                  {"model", st.ctx->opts.model_name},
                  {"choices", json::array()},
                  {"usage", usage_of(st)}};
    st.events.push_back("data: " + dump(chunk) + "\n\n");
  }
  st.done = true;
  st.stats_version = st.ctx->engine->stats_version() + 1;  // the snapshot after this step
  st.ctx->in_flight.fetch_sub(1);
}

// The token callback (engine thread): appends text and queues SSE events; never blocks on I/O.
void on_event(const std::shared_ptr<RequestState>& sp, const TokenEvent& ev) {
  RequestState& st = *sp;
  if (ev.finish != FinishReason::kNone) record_metrics(*st.ctx, ev);
  std::unique_lock<std::mutex> lock(st.mu);
  if (ev.index < 0 || ev.index >= int(st.choices.size())) return;
  ChoiceState& c = st.choices[size_t(ev.index)];
  const json lp = note_token(st, c, ev);
  c.text += ev.text;
  std::string reasoning, content;  // what this event adds to each
  if (st.req.think && !c.splitter) c.splitter.emplace(*st.req.think, st.req.think_inside);
  if (c.splitter) {
    c.splitter->feed(ev.text, &reasoning, &content);
    if (ev.finish != FinishReason::kNone) c.splitter->finish(&reasoning, &content);
  } else {
    content = ev.text;
  }
  c.reasoning += reasoning;
  c.content += content;
  if (ev.metrics) st.cached_tokens = std::max(st.cached_tokens, ev.metrics->cached_tokens);
  // With tools the content goes through the call parser: text before a call streams as content,
  // calls as tool_calls deltas, a suffix that may open a call waits for the next tokens.
  const bool tool_stream = st.req.stream && !st.req.tools.empty();
  ToolCallStream::Delta calls;
  if (tool_stream) {
    if (!c.tools) c.tools.emplace(st.req, st.id + "-" + std::to_string(ev.index) + "-");
    calls = c.tools->update(c.content, ev.finish != FinishReason::kNone);
  }
  const std::string& sent = tool_stream ? calls.content : content;
  const bool emit = !sent.empty() || !reasoning.empty() || (!tool_stream && !lp.is_null()) || !c.started;
  if (st.req.stream && emit) {
    st.events.push_back(
        sse_chunk(st, ev.index, sent, tool_stream ? json(nullptr) : lp, nullptr, !c.started, reasoning));
    c.started = true;
  }
  if (!calls.tool_calls.empty()) st.events.push_back(sse_tool_chunk(st, ev.index, calls.tool_calls));
  if (ev.finish == FinishReason::kNone) return st.cv.notify_all();
  c.finish = ev.finish;
  c.error = ev.error;
  std::vector<double> itl;
  itl.swap(c.itl_s);
  queue_finish(st, c, ev, tool_stream);
  st.cv.notify_all();
  const bool done = st.done;
  lock.unlock();  // ctx.mu is taken before a request's own lock, never after
  std::lock_guard<std::mutex> ctx_lock(st.ctx->mu);
  for (double gap : itl) st.ctx->itl_hist.observe(gap);
  if (done) st.ctx->running.erase(ev.id);
}

json full_response(const RequestState& st) {
  json choices = json::array();
  for (size_t i = 0; i < st.choices.size(); ++i) {
    const ChoiceState& c = st.choices[i];
    json ch = {{"index", i}, {"finish_reason", finish_text(c.finish)}, {"logprobs", choice_logprobs(st, c)}};
    std::string before;
    json calls = st.req.chat && c.finish == FinishReason::kStop
                     ? parse_tool_calls(st.req, c.content, st.id + "-" + std::to_string(i) + "-", &before)
                     : json(nullptr);
    if (!calls.is_null()) {
      ch["message"] = {{"role", "assistant"}, {"content", before.empty() ? json(nullptr) : json(before)}, {"tool_calls", calls}};
      ch["finish_reason"] = "tool_calls";
    } else if (st.req.chat) {
      ch["message"] = {{"role", "assistant"}, {"content", c.content}};
    } else {
      ch["text"] = c.text;
    }
    if (st.req.chat && st.req.think) ch["message"]["reasoning_content"] = c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
    choices.push_back(ch);
  }
  return {{"id", st.id}, {"object", st.req.chat ? "chat.completion" : "text_completion"}, {"created", st.created},
          {"model", st.ctx->opts.model_name}, {"choices", choices}, {"usage", usage_of(st)}};
}

// ---------------------------------------------------------------------------------------------
// Handlers

void stream_response(ServerContext& ctx, std::shared_ptr<RequestState> st, RequestId id, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, st, id](size_t, httplib::DataSink& sink) {
        std::deque<std::string> batch;
        bool done;
        {
          std::unique_lock<std::mutex> lock(st->mu);
          st->cv.wait_for(lock, std::chrono::seconds(1), [&] { return !st->events.empty() || st->done; });
          batch.swap(st->events);
          done = st->done;
        }
        // A comment line when idle: a client that went away makes the write fail, which cancels.
        if (batch.empty() && !done) batch.push_back(": keep-alive\n\n");
        for (const auto& e : batch)
          if (!sink.write(e.data(), e.size())) {
            ctx.engine->cancel(id);
            return false;
          }
        if (done) {
          // /metrics shows the request finished by the time the client reads the end.
          ctx.engine->wait_stats_version(st->stats_version, std::chrono::seconds(1));
          static const std::string kDone = "data: [DONE]\n\n";
          sink.write(kDone.data(), kDone.size());
          sink.done();
        }
        return true;
      },
      [&ctx, st, id](bool success) {
        if (!success) ctx.engine->cancel(id);  // the client disconnected: free its blocks
      });
}


}  // namespace

void handle_generate(ServerContext& ctx, bool chat, const httplib::Request& hreq, httplib::Response& res) {
  if (!ctx.ready.load())
    return send_error(ctx, res, {503, "the model is still loading", "", "loading", "server_error"});
  if (ctx.shutting_down.load())
    return send_error(ctx, res, {503, "the server is shutting down", "", "shutting_down", "server_error"});
  auto st = std::make_shared<RequestState>();
  st->ctx = &ctx;
  st->req.chat = chat;
  std::optional<ApiError> bad;
  try {
    bad = parse_request(ctx, hreq.body, &st->req);
  } catch (const json::exception& e) {  // a shape the checks above did not foresee: still the client's
    bad = ApiError{400, std::string("malformed request: ") + e.what()};
  }
  if (bad) return send_error(ctx, res, *bad);
  // Bounded admission: beyond max_in_flight, tell the client when to retry.
  if (ctx.in_flight.fetch_add(1) >= ctx.opts.max_in_flight) {
    ctx.in_flight.fetch_sub(1);
    res.set_header("Retry-After", "1");
    return send_error(ctx, res, {429, "the server is at capacity (" + std::to_string(ctx.opts.max_in_flight) +
                                          " requests in flight); retry later", "", "rate_limit_exceeded", "rate_limit_error"});
  }
  st->choices.resize(size_t(st->req.gen.n));
  st->created = int64_t(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  GenerationRequest gen = st->req.gen;
  gen.on_token = [st](const TokenEvent& ev) { on_event(st, ev); };
  auto id = ctx.engine->submit(std::move(gen));
  if (!id.ok()) {
    ctx.in_flight.fetch_sub(1);
    const int status = id.status().code() == StatusCode::kUnavailable ? 503 : 400;
    return send_error(ctx, res, {status, id.status().message(), "", "", status == 503 ? "server_error" : "invalid_request_error"});
  }
  {
    std::lock_guard<std::mutex> ctx_lock(ctx.mu);
    std::lock_guard<std::mutex> lock(st->mu);
    st->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(*id);
    if (!st->done) ctx.running.insert(*id);  // for the abort when the shutdown grace ends
  }
  if (st->req.stream) return stream_response(ctx, st, *id, res);
  // Non-streaming: nothing is written until the end, so a client that goes away is noticed by
  // watching its connection; it cancels the request, which frees its blocks.
  std::unique_lock<std::mutex> lock(st->mu);
  while (!st->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return st->done; })) {
    if (!client_gone()) continue;
    ctx.engine->cancel(*id);
    st->cv.wait(lock, [&] { return st->done; });  // the cancelled finish event follows
    return;
  }
  const uint64_t version = st->stats_version;
  lock.unlock();
  ctx.engine->wait_stats_version(version, std::chrono::seconds(1));  // /metrics already shows it finished
  lock.lock();
  for (const auto& c : st->choices)
    if (c.finish == FinishReason::kError)
      return send_error(ctx, res, {500, c.error, "", "", "server_error"});
  res.set_content(dump(full_response(*st)), "application/json");
}

}  // namespace tessera::server

#include "examples/cli/serve_openai.h"
#include "examples/cli/common.h"
#include "examples/cli/serve_peer.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

namespace tessera::cli {

using nlohmann::json;

namespace {

// Generated text may hold invalid UTF-8 (a random model, a token split mid-character at a stop):
// replace it rather than let the JSON library throw.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;
  std::string code;
  std::string type = "invalid_request_error";
};

void send_error(ServerContext& ctx, httplib::Response& res, const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  res.status = e.status;
  res.set_content(dump(json{{"error", err}}), "application/json");
  std::lock_guard<std::mutex> lock(ctx.mu);
  ++ctx.http_errors[e.status];
}

// ---------------------------------------------------------------------------------------------
// Request parsing

struct ParsedRequest {
  GenerationRequest gen;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool want_logprobs = false;  // completions: logprobs >= 0; chat: logprobs == true
};

// Reads an optional field of |body| with a type check; an error names the field and the type.
template <typename T>
std::optional<ApiError> read_field(const json& body, const char* name, const char* type_name, T* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  const bool ok = [&] {
    if constexpr (std::is_same_v<T, bool>) return it->is_boolean();
    else if constexpr (std::is_integral_v<T>) return it->is_number_integer();
    else if constexpr (std::is_floating_point_v<T>) return it->is_number();
    else return it->is_string();
  }();
  if (!ok) return ApiError{400, std::string("'") + name + "' must be " + type_name + ", got " + it->type_name(), name};
  *out = it->get<T>();
  return std::nullopt;
}

std::optional<ApiError> range_error(const char* name, bool ok, const std::string& what) {
  if (ok) return std::nullopt;
  return ApiError{400, std::string("'") + name + "' " + what, name};
}

std::optional<ApiError> parse_stop(const json& body, std::vector<std::string>* stop) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    stop->push_back(it->get<std::string>());
  } else if (it->is_array() && it->size() <= 4) {
    for (const auto& s : *it) {
      if (!s.is_string()) return ApiError{400, "'stop' must be a string or an array of up to 4 strings", "stop"};
      stop->push_back(s.get<std::string>());
    }
  } else {
    return ApiError{400, "'stop' must be a string or an array of up to 4 strings", "stop"};
  }
  return std::nullopt;
}

// Renders chat |messages| with the model's own chat template (models/chat_template, through the
// CLI's apply_chat_template; a model without one gets the turns concatenated). A template that
// raises (e.g. roles out of order) is the client's error: 400 naming the template's message.
std::optional<ApiError> render_chat(const Model& model, const json& messages, std::string* text) {
  if (!messages.is_array() || messages.empty())
    return ApiError{400, "'messages' must be a non-empty array", "messages"};
  std::vector<std::pair<std::string, std::string>> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      return ApiError{400, "'" + where + "' must be an object with a string 'role'", where};
    std::string content;
    const json& c = m.contains("content") ? m["content"] : json();
    if (c.is_string()) {
      content = c.get<std::string>();
    } else if (c.is_array()) {  // content parts: only text parts
      for (const auto& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          return ApiError{400, "'" + where + ".content' parts must be {\"type\": \"text\", \"text\": string}", where + ".content"};
        content += part["text"].get<std::string>();
      }
    } else if (!c.is_null()) {
      return ApiError{400, "'" + where + ".content' must be a string or an array of text parts", where + ".content"};
    }
    turns.emplace_back(m["role"].get<std::string>(), std::move(content));
  }
  auto rendered = cli::apply_chat_template(model, turns, /*add_generation_prompt=*/true);
  if (!rendered.ok()) return ApiError{400, "chat template: " + rendered.status().message(), "messages"};
  *text = std::move(rendered).value();
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const Model& model, const json& body, std::vector<int32_t>* tokens) {
  auto it = body.find("prompt");
  if (it == body.end()) return ApiError{400, "'prompt' is required", "prompt"};
  const Tokenizer& tok = model.tokenizer();
  if (it->is_string()) {
    *tokens = tok.encode(it->get<std::string>(), true, true);
  } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    *tokens = tok.encode((*it)[0].get<std::string>(), true, true);
  } else if (it->is_array() && !it->empty() && std::all_of(it->begin(), it->end(), [](const json& t) { return t.is_number_integer(); })) {
    for (const auto& t : *it) tokens->push_back(t.get<int32_t>());
  } else {
    return ApiError{400, "'prompt' must be a string, an array of one string, or an array of token ids (batched prompts are not supported; send one request each)", "prompt"};
  }
  return std::nullopt;
}

std::optional<ApiError> parse_sampling(const json& body, ParsedRequest* out) {
  SamplingParams& sp = out->gen.sampling;
  sp = SamplingParams{};
  sp.temperature = 1.0f;  // OpenAI defaults: plain sampling at temperature 1
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  double temperature = 1.0, top_p = 1.0, presence = 0.0, frequency = 0.0;
  int64_t seed = 0, max_tokens = 16, n = 1;
  if (out->chat) max_tokens = 256;
  if (auto e = read_field(body, "temperature", "a number", &temperature)) return e;
  if (auto e = read_field(body, "top_p", "a number", &top_p)) return e;
  if (auto e = read_field(body, "presence_penalty", "a number", &presence)) return e;
  if (auto e = read_field(body, "frequency_penalty", "a number", &frequency)) return e;
  if (auto e = read_field(body, "seed", "an integer", &seed)) return e;
  if (auto e = read_field(body, "max_tokens", "an integer", &max_tokens)) return e;
  if (auto e = read_field(body, "max_completion_tokens", "an integer", &max_tokens)) return e;
  if (auto e = read_field(body, "n", "an integer", &n)) return e;
  if (auto e = range_error("temperature", temperature >= 0 && temperature <= 2, "must be in [0, 2]")) return e;
  if (auto e = range_error("top_p", top_p > 0 && top_p <= 1, "must be in (0, 1]")) return e;
  if (auto e = range_error("presence_penalty", presence >= -2 && presence <= 2, "must be in [-2, 2]")) return e;
  if (auto e = range_error("frequency_penalty", frequency >= -2 && frequency <= 2, "must be in [-2, 2]")) return e;
  if (auto e = range_error("max_tokens", max_tokens >= 1 && max_tokens <= (1 << 20), "must be a positive integer")) return e;
  if (auto e = range_error("n", n >= 1 && n <= 16, "must be in [1, 16]")) return e;
  sp.temperature = float(temperature);
  sp.top_p = float(top_p);
  sp.presence_penalty = float(presence);
  sp.frequency_penalty = float(frequency);
  sp.seed = uint64_t(seed);
  out->gen.max_tokens = int32_t(max_tokens);
  out->gen.n = int(n);
  if (out->chat) {
    bool logprobs = false;
    int64_t top = 0;
    if (auto e = read_field(body, "logprobs", "a boolean", &logprobs)) return e;
    if (auto e = read_field(body, "top_logprobs", "an integer", &top)) return e;
    if (auto e = range_error("top_logprobs", top >= 0 && top <= 20, "must be in [0, 20]")) return e;
    out->want_logprobs = logprobs;
    sp.logprobs = logprobs ? int(top) : 0;
  } else {
    int64_t logprobs = -1;
    if (auto e = read_field(body, "logprobs", "an integer", &logprobs)) return e;
    if (auto e = range_error("logprobs", logprobs >= -1 && logprobs <= 5, "must be in [0, 5]")) return e;
    out->want_logprobs = logprobs >= 0;
    sp.logprobs = int(std::max<int64_t>(logprobs, 0));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_request(ServerContext& ctx, const std::string& raw, ParsedRequest* out) {
  const json body = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return ApiError{400, "the request body is not valid JSON", "", "invalid_json"};
  if (!body.is_object()) return ApiError{400, "the request body must be a JSON object"};
  std::string model_name = ctx.opts.model_name;
  if (auto e = read_field(body, "model", "a string", &model_name)) return e;
  if (model_name != ctx.opts.model_name)
    return ApiError{404, "the model '" + model_name + "' does not exist (this server serves '" + ctx.opts.model_name + "')",
                    "model", "model_not_found"};
  if (auto e = read_field(body, "stream", "a boolean", &out->stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return ApiError{400, "'stream_options' must be an object", "stream_options"};
    if (auto e = read_field(*it, "include_usage", "a boolean", &out->include_usage)) return e;
  }
  if (auto e = parse_stop(body, &out->gen.stop)) return e;
  // An extension (as in vLLM): keep generating past end-of-generation tokens, for benchmarks.
  if (auto e = read_field(body, "ignore_eos", "a boolean", &out->gen.ignore_eos)) return e;
  // Another: higher runs first and is preempted last.
  if (auto e = read_field(body, "priority", "an integer", &out->gen.priority)) return e;
  if (auto e = parse_sampling(body, out)) return e;
  if (out->chat) {
    if (!body.contains("messages")) return ApiError{400, "'messages' is required", "messages"};
    std::string text;
    if (auto e = render_chat(ctx.model, body["messages"], &text)) return e;
    out->gen.prompt = ctx.model.tokenizer().encode(text, true, true);
  } else if (auto e = parse_prompt(ctx.model, body, &out->gen.prompt)) {
    return e;
  }
  const Status s = ctx.engine.validate(out->gen);
  if (!s.ok()) {
    const bool too_long = s.message().find("context") != std::string::npos || s.code() == StatusCode::kResourceExhausted;
    return ApiError{400, s.message(), out->chat ? "messages" : "prompt", too_long ? "context_length_exceeded" : ""};
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// One request in flight: filled by engine-thread callbacks, read by the HTTP handler.

struct ChoiceState {
  std::string text;
  json logprobs = json::array();  // chat: content entries; completions: parallel arrays below
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), text_offset = json::array();
  int32_t n_tokens = 0;
  bool started = false;
  FinishReason finish = FinishReason::kNone;
  std::string error;
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
};

const char* finish_text(FinishReason r) { return r == FinishReason::kLength ? "length" : "stop"; }

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

// One streamed chunk of choice |index|.
std::string sse_chunk(const RequestState& st, int index, const std::string& text, const json& logprobs, const char* finish,
                      bool first) {
  json choice = {{"index", index}, {"finish_reason", finish ? json(finish) : json(nullptr)}, {"logprobs", logprobs}};
  if (st.req.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || first) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  json chunk = {{"id", st.id}, {"object", st.req.chat ? "chat.completion.chunk" : "text_completion"}, {"created", st.created},
                {"model", st.ctx->opts.model_name}, {"choices", json::array({choice})}};
  return "data: " + dump(chunk) + "\n\n";
}

void record_metrics(ServerContext& ctx, const TokenEvent& ev) {
  std::lock_guard<std::mutex> lock(ctx.mu);
  ++ctx.finished[ev.finish == FinishReason::kCancelled ? "cancelled" : ev.finish == FinishReason::kError ? "error" : finish_text(ev.finish)];
  if (!ev.metrics || ev.index != 0) return;
  const RequestMetrics& m = *ev.metrics;
  if (m.generated_tokens > 0) { ctx.ttft_sum_s += m.ttft_ms / 1e3; ++ctx.ttft_count; }
  if (m.generated_tokens > 1) { ctx.tpot_sum_s += m.tpot_ms / 1e3; ++ctx.tpot_count; }
  ctx.e2e_sum_s += m.e2e_ms / 1e3;
  ++ctx.e2e_count;
  ctx.cached_prompt_tokens += m.cached_tokens;
}

// The token callback (engine thread): appends text and queues SSE events; never blocks on I/O.
void on_event(const std::shared_ptr<RequestState>& sp, const TokenEvent& ev) {
  RequestState& st = *sp;
  if (ev.finish != FinishReason::kNone) record_metrics(*st.ctx, ev);
  std::lock_guard<std::mutex> lock(st.mu);
  if (ev.index < 0 || ev.index >= int(st.choices.size())) return;
  ChoiceState& c = st.choices[size_t(ev.index)];
  json lp = nullptr;
  if (ev.token >= 0) {
    ++c.n_tokens;
    if (st.req.want_logprobs) {
      const size_t before = st.req.chat ? c.logprobs.size() : c.tokens.size();
      add_logprobs(st.ctx->model, st, c, ev);
      if (st.req.stream) {
        if (st.req.chat) lp = {{"content", json::array({c.logprobs[before]})}};
        else lp = {{"tokens", {c.tokens[before]}}, {"token_logprobs", {c.token_logprobs[before]}},
                   {"top_logprobs", {c.top_logprobs[before]}}, {"text_offset", {c.text_offset[before]}}};
      }
    }
  }
  c.text += ev.text;
  if (ev.metrics) st.cached_tokens = std::max(st.cached_tokens, ev.metrics->cached_tokens);
  if (st.req.stream && (!ev.text.empty() || !lp.is_null() || !c.started)) {
    st.events.push_back(sse_chunk(st, ev.index, ev.text, lp, nullptr, !c.started));
    c.started = true;
  }
  if (ev.finish == FinishReason::kNone) return st.cv.notify_all();
  c.finish = ev.finish;
  c.error = ev.error;
  if (st.req.stream) {
    if (ev.finish == FinishReason::kError) {
      json err = {{"error", {{"message", ev.error}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}};
      st.events.push_back("data: " + dump(err) + "\n\n");
    } else {
      st.events.push_back(sse_chunk(st, ev.index, "", nullptr, finish_text(ev.finish), !c.started));
    }
  }
  if (++st.n_finished == int(st.choices.size())) {
    if (st.req.stream && st.req.include_usage) {
      json chunk = {{"id", st.id}, {"object", st.req.chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", st.created}, {"model", st.ctx->opts.model_name}, {"choices", json::array()}, {"usage", usage_of(st)}};
      st.events.push_back("data: " + dump(chunk) + "\n\n");
    }
    st.done = true;
    st.ctx->in_flight.fetch_sub(1);
  }
  st.cv.notify_all();
}

json full_response(const RequestState& st) {
  json choices = json::array();
  for (size_t i = 0; i < st.choices.size(); ++i) {
    const ChoiceState& c = st.choices[i];
    json ch = {{"index", i}, {"finish_reason", finish_text(c.finish)}, {"logprobs", choice_logprobs(st, c)}};
    if (st.req.chat) ch["message"] = {{"role", "assistant"}, {"content", c.text}};
    else ch["text"] = c.text;
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
            ctx.engine.cancel(id);
            return false;
          }
        if (done) {
          static const std::string kDone = "data: [DONE]\n\n";
          sink.write(kDone.data(), kDone.size());
          sink.done();
        }
        return true;
      },
      [&ctx, st, id](bool success) {
        if (!success) ctx.engine.cancel(id);  // the client disconnected: free its blocks
      });
}

void handle_generate(ServerContext& ctx, bool chat, const httplib::Request& hreq, httplib::Response& res) {
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
  auto id = ctx.engine.submit(std::move(gen));
  if (!id.ok()) {
    ctx.in_flight.fetch_sub(1);
    const int status = id.status().code() == StatusCode::kUnavailable ? 503 : 400;
    return send_error(ctx, res, {status, id.status().message(), "", "", status == 503 ? "server_error" : "invalid_request_error"});
  }
  {
    std::lock_guard<std::mutex> lock(st->mu);
    st->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(*id);
  }
  if (st->req.stream) return stream_response(ctx, st, *id, res);
  // Non-streaming: nothing is written until the end, so a client that goes away is noticed by
  // watching its socket; it cancels the request, which frees its blocks.
  PeerWatch peer(hreq.remote_addr, hreq.remote_port, hreq.local_port);
  std::unique_lock<std::mutex> lock(st->mu);
  while (!st->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return st->done; })) {
    if (!peer.closed()) continue;
    ctx.engine.cancel(*id);
    st->cv.wait(lock, [&] { return st->done; });  // the cancelled finish event follows
    return;
  }
  for (const auto& c : st->choices)
    if (c.finish == FinishReason::kError)
      return send_error(ctx, res, {500, c.error, "", "", "server_error"});
  res.set_content(dump(full_response(*st)), "application/json");
}

std::string prometheus(ServerContext& ctx) {
  const EngineStats s = ctx.engine.stats();
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << "\n" << name << ' ' << v << "\n";
  };
  metric("tessera_requests_running", "gauge", "Sequences holding KV blocks.", s.running);
  metric("tessera_requests_waiting", "gauge", "Sequences queued for admission (queue depth).", s.waiting);
  metric("tessera_http_requests_in_flight", "gauge", "Generation requests admitted and not finished.", ctx.in_flight.load());
  metric("tessera_kv_blocks_used", "gauge", "KV blocks owned by sequences.", s.kv.blocks_used);
  metric("tessera_kv_blocks_cached", "gauge", "Free KV blocks still holding reusable prefixes.", s.kv.blocks_cached);
  metric("tessera_kv_blocks_total", "gauge", "KV blocks in the pool.", s.kv_blocks_total);
  metric("tessera_kv_slots_waste", "gauge", "Allocated KV slots holding no token.", double(s.kv.slots_waste));
  metric("tessera_kv_slots_allocated", "gauge", "Allocated KV slots.", double(s.kv.slots_allocated));
  metric("tessera_preemptions_total", "counter", "Sequences preempted for KV space.", double(s.preemptions));
  metric("tessera_swap_out_total", "counter", "Preemptions that swapped KV blocks to host memory.", double(s.swap_outs));
  metric("tessera_swap_in_total", "counter", "Swapped sequences brought back.", double(s.swap_ins));
  metric("tessera_kv_blocks_swapped_out_total", "counter", "KV blocks copied to host memory.", double(s.blocks_swapped_out));
  metric("tessera_kv_blocks_swapped_in_total", "counter", "KV blocks copied back from host memory.", double(s.blocks_swapped_in));
  metric("tessera_steps_total", "counter", "Engine steps run.", double(s.steps));
  metric("tessera_prompt_tokens_total", "counter", "Prompt tokens admitted.", double(s.prompt_tokens));
  metric("tessera_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.", double(s.cached_tokens));
  metric("tessera_prefix_cache_hit_rate", "gauge", "Cached over admitted prompt tokens.", s.prefix_hit_rate());
  metric("tessera_generation_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  metric("tessera_step_tokens", "gauge", "Tokens in the latest engine step.", s.last_step_tokens);
  metric("tessera_step_prefill_tokens", "gauge", "Prefill chunk tokens in the latest engine step.", s.last_prefill_tokens);
  metric("tessera_step_seconds", "gauge", "Measured time of the latest engine step.", s.last_step_ms / 1e3);
  metric("tessera_step_predicted_seconds", "gauge", "Step cost model's prediction for the latest step.", s.last_step_predicted_ms / 1e3);
  metric("tessera_step_limit_seconds", "gauge", "Step time limit of the latest step's prefill chunks (0: none).", s.last_step_limit_ms / 1e3);
  metric("tessera_prefill_chunks_cost_limited_total", "counter", "Prefill chunks the step cost limit cut below the token budget.",
         double(s.cost_limited_chunks));
  o << "# HELP tessera_step_cost_seconds Fitted step cost coefficients (seconds per step, token, sampled row, query-key pair).\n"
       "# TYPE tessera_step_cost_seconds gauge\n";
  const std::pair<const char*, double> terms[] = {{"step", s.step_cost.c0_ms}, {"token", s.step_cost.token_ms},
                                                  {"logit", s.step_cost.logit_ms}, {"pair", s.step_cost.pair_ms}};
  for (const auto& [term, ms] : terms) o << "tessera_step_cost_seconds{term=\"" << term << "\"} " << ms / 1e3 << "\n";
  std::lock_guard<std::mutex> lock(ctx.mu);
  o << "# HELP tessera_request_finished_total Finished choices by reason.\n# TYPE tessera_request_finished_total counter\n";
  for (const auto& [reason, n] : ctx.finished) o << "tessera_request_finished_total{reason=\"" << reason << "\"} " << n << "\n";
  o << "# HELP tessera_http_errors_total Error responses by status.\n# TYPE tessera_http_errors_total counter\n";
  for (const auto& [code, n] : ctx.http_errors) o << "tessera_http_errors_total{code=\"" << code << "\"} " << n << "\n";
  auto summary = [&](const char* name, const char* help, double sum, int64_t count) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " summary\n"
      << name << "_sum " << sum << "\n" << name << "_count " << count << "\n";
  };
  summary("tessera_time_to_first_token_seconds", "Submit to first token.", ctx.ttft_sum_s, ctx.ttft_count);
  summary("tessera_time_per_output_token_seconds", "Mean time per output token after the first.", ctx.tpot_sum_s, ctx.tpot_count);
  summary("tessera_e2e_request_latency_seconds", "Submit to finish.", ctx.e2e_sum_s, ctx.e2e_count);
  return o.str();
}

}  // namespace

void register_routes(httplib::Server& svr, ServerContext& ctx) {
  svr.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    const bool ok = !ctx.shutting_down.load();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? R"({"status":"ok"})" : R"({"status":"shutting_down"})", "application/json");
  });
  svr.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus(ctx), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    json m = {{"id", ctx.opts.model_name}, {"object", "model"}, {"created", ctx.created_base.load()}, {"owned_by", "tessera"},
              {"max_model_len", ctx.model.context_length()}};
    res.set_content(dump(json{{"object", "list"}, {"data", json::array({m})}}), "application/json");
  });
  svr.Post("/v1/completions", [&ctx](const httplib::Request& req, httplib::Response& res) { handle_generate(ctx, false, req, res); });
  svr.Post("/v1/chat/completions", [&ctx](const httplib::Request& req, httplib::Response& res) { handle_generate(ctx, true, req, res); });
  svr.set_exception_handler([&ctx](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(ctx, res, {500, "internal error: " + what, "", "", "server_error"});
  });
  svr.set_error_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler already wrote an error body
    if (res.status == 404) send_error(ctx, res, {404, "no route for " + req.method + " " + req.path, "", "not_found"});
  });
}

}  // namespace tessera::cli

#include "server/embeddings.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "server/errors.h"
#include "server/http.h"

namespace tessera::server {

using nlohmann::json;

namespace {

// OpenAI's limit on the inputs of one request.
constexpr size_t kMaxInputs = 2048;

std::optional<ApiError> token_array(const ServerContext& ctx, const json& a, const std::string& param,
                                    std::vector<int32_t>* out) {
  const int32_t vocab = ctx.model->tokenizer().vocab_size();
  for (const json& t : a) {
    if (!t.is_number_integer()) return ApiError{400, "'" + param + "' must hold token ids (integers)", param};
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab)
      return ApiError{400, "'" + param + "' token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                               std::to_string(vocab) + ")", param};
    out->push_back(int32_t(id));
  }
  return std::nullopt;
}

std::optional<ApiError> parse_input(ServerContext& ctx, const json& in, EmbeddingRequest* out) {
  const Tokenizer& tok = ctx.model->tokenizer();
  auto text = [&](const std::string& s) { out->inputs.push_back(tok.encode(s, /*add_special=*/true, /*parse_special=*/false)); };
  if (in.is_string()) {
    text(in.get<std::string>());
    return std::nullopt;
  }
  if (!in.is_array() || in.empty())
    return ApiError{400, "'input' must be a string, an array of strings, an array of token ids or an array of token-id arrays",
                    "input"};
  if (in.size() > kMaxInputs)
    return ApiError{400, "'input' has " + std::to_string(in.size()) + " entries; at most " + std::to_string(kMaxInputs), "input"};
  if (in[0].is_number_integer()) {  // one input as token ids
    out->inputs.emplace_back();
    return token_array(ctx, in, "input", &out->inputs.back());
  }
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string param = "input[" + std::to_string(i) + "]";
    if (in[i].is_string()) {
      text(in[i].get<std::string>());
    } else if (in[i].is_array() && !in[i].empty()) {
      out->inputs.emplace_back();
      if (auto e = token_array(ctx, in[i], param, &out->inputs.back())) return e;
    } else {
      return ApiError{400, "'" + param + "' must be a string or a non-empty array of token ids", param};
    }
  }
  return std::nullopt;
}

// One HTTP request's embedding requests: filled by engine-thread callbacks.
struct EmbedState {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<float>> vectors;
  std::vector<std::string> errors;
  size_t n_finished = 0;
  bool failed = false;
};

const char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

std::string base64_floats(const std::vector<float>& v) {
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u = 0;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + size_t(b)] = char((u >> (8 * b)) & 0xFF);  // little-endian
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (uint32_t(uint8_t(bytes[i])) << 16) | (i + 1 < bytes.size() ? uint32_t(uint8_t(bytes[i + 1])) << 8 : 0) |
                       (i + 2 < bytes.size() ? uint32_t(uint8_t(bytes[i + 2])) : 0);
    out += kBase64[(n >> 18) & 63];
    out += kBase64[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kBase64[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kBase64[n & 63] : '=';
  }
  return out;
}

std::optional<ApiError> parse_embedding_request(ServerContext& ctx, const std::string& raw, EmbeddingRequest* out) {
  const json body = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return ApiError{400, "the request body is not valid JSON", "", "invalid_json"};
  if (!body.is_object()) return ApiError{400, "the request body must be a JSON object"};
  auto m = body.find("model");
  if (m != body.end() && !m->is_null()) {
    if (!m->is_string()) return ApiError{400, "'model' must be a string, got " + std::string(m->type_name()), "model"};
    if (m->get<std::string>() != ctx.opts.model_name)
      return ApiError{404, "the model '" + m->get<std::string>() + "' does not exist (this server serves '" +
                               ctx.opts.model_name + "')", "model", "model_not_found"};
  }
  if (ctx.model->embedding_dim() <= 0)
    return ApiError{400, "the model '" + ctx.opts.model_name + "' cannot produce embeddings: " + ctx.model->why_no_embeddings(),
                    "model", "model_not_supported"};
  if (auto f = body.find("encoding_format"); f != body.end() && !f->is_null()) {
    if (!f->is_string() || (f->get<std::string>() != "float" && f->get<std::string>() != "base64"))
      return ApiError{400, "'encoding_format' must be \"float\" or \"base64\"", "encoding_format"};
    out->base64 = f->get<std::string>() == "base64";
  }
  if (auto d = body.find("dimensions"); d != body.end() && !d->is_null()) {
    if (!d->is_number_integer() || d->get<int64_t>() != ctx.model->embedding_dim())
      return ApiError{400, "'dimensions' must be this model's embedding width, " + std::to_string(ctx.model->embedding_dim()) +
                               " (shortened embeddings are not supported)", "dimensions"};
  }
  auto in = body.find("input");
  if (in == body.end() || in->is_null()) return ApiError{400, "'input' is required", "input"};
  if (auto e = parse_input(ctx, *in, out)) return e;
  for (size_t i = 0; i < out->inputs.size(); ++i) {
    GenerationRequest g;
    g.embed = true;
    g.prompt = out->inputs[i];
    if (Status s = ctx.engine->validate(g); !s.ok())
      return ApiError{400, "input " + std::to_string(i) + ": " + s.message(), "input",
                      s.message().find("tokens") != std::string::npos ? "context_length_exceeded" : ""};
  }
  return std::nullopt;
}

namespace {

// The reply to an embeddings request whose inputs all finished: OpenAI's list of vectors (or the
// first input's error, a 500).
void send_embeddings(ServerContext& ctx, httplib::Response& res, const EmbedState& st, bool base64,
                     int64_t prompt_tokens) {
  const size_t n = st.vectors.size();
  if (st.failed) {
    for (size_t i = 0; i < n; ++i)
      if (!st.errors[i].empty())
        return send_error(ctx, res, {500, "input " + std::to_string(i) + ": " + st.errors[i], "", "", "server_error"});
  }
  json data = json::array();
  for (size_t i = 0; i < n; ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (base64) e["embedding"] = base64_floats(st.vectors[i]);
    else e["embedding"] = st.vectors[i];
    data.push_back(std::move(e));
  }
  {
    std::lock_guard<std::mutex> ctx_lock(ctx.mu);
    ctx.finished["stop"] += int64_t(n);
    ctx.prompt_tokens += prompt_tokens;
  }
  json body = {{"object", "list"},
               {"data", std::move(data)},
               {"model", ctx.opts.model_name},
               {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
  res.set_content(dump(body), "application/json");
}

}  // namespace

void handle_embeddings(ServerContext& ctx, const httplib::Request& hreq, httplib::Response& res) {
  if (!ctx.ready.load()) return send_error(ctx, res, {503, "the model is still loading", "", "loading", "server_error"});
  if (ctx.shutting_down.load())
    return send_error(ctx, res, {503, "the server is shutting down", "", "shutting_down", "server_error"});
  EmbeddingRequest req;
  std::optional<ApiError> bad;
  try {
    bad = parse_embedding_request(ctx, hreq.body, &req);
  } catch (const json::exception& e) {
    bad = ApiError{400, std::string("malformed request: ") + e.what()};
  }
  if (bad) return send_error(ctx, res, *bad);
  if (ctx.in_flight.fetch_add(1) >= ctx.opts.max_in_flight) {
    ctx.in_flight.fetch_sub(1);
    res.set_header("Retry-After", "1");
    return send_error(ctx, res, {429, "the server is at capacity (" + std::to_string(ctx.opts.max_in_flight) +
                                          " requests in flight); retry later", "", "rate_limit_exceeded", "rate_limit_error"});
  }
  // Every input is one engine request; the engine batches them into steps with other work.
  auto st = std::make_shared<EmbedState>();
  const size_t n = req.inputs.size();
  st->vectors.resize(n);
  st->errors.resize(n);
  std::vector<RequestId> ids;
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    GenerationRequest g;
    g.embed = true;
    g.prompt = std::move(req.inputs[i]);
    prompt_tokens += int64_t(g.prompt.size());
    g.on_token = [st, i](const TokenEvent& ev) {
      if (ev.finish == FinishReason::kNone) return;
      std::lock_guard<std::mutex> lock(st->mu);
      st->vectors[i] = ev.embedding;
      if (ev.finish != FinishReason::kStop) {
        st->failed = true;
        st->errors[i] = ev.error.empty() ? std::string("embedding request ") + finish_reason_name(ev.finish) : ev.error;
      }
      ++st->n_finished;
      st->cv.notify_all();
    };
    auto id = ctx.engine->submit(std::move(g));
    if (!id.ok()) {
      for (RequestId r : ids) ctx.engine->cancel(r);
      std::unique_lock<std::mutex> lock(st->mu);
      st->cv.wait(lock, [&] { return st->n_finished == ids.size(); });
      lock.unlock();
      ctx.in_flight.fetch_sub(1);
      const int status = id.status().code() == StatusCode::kUnavailable ? 503 : 400;
      return send_error(ctx, res, {status, "input " + std::to_string(i) + ": " + id.status().message(), "input", "",
                                   status == 503 ? "server_error" : "invalid_request_error"});
    }
    ids.push_back(*id);
  }
  std::unique_lock<std::mutex> lock(st->mu);
  while (!st->cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return st->n_finished == n; })) {
    if (!client_gone()) continue;
    lock.unlock();
    for (RequestId r : ids) ctx.engine->cancel(r);
    lock.lock();
    st->cv.wait(lock, [&] { return st->n_finished == n; });
    ctx.in_flight.fetch_sub(1);
    return;
  }
  ctx.in_flight.fetch_sub(1);
  send_embeddings(ctx, res, *st, req.base64, prompt_tokens);
}

}  // namespace tessera::server

#include "server/request.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "server/chat.h"
#include "server/structured.h"

namespace tessera::server {

using nlohmann::json;

namespace {

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
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // get<T>() narrows silently (4294967297 would read as 1 into an int32): range-check first.
    const bool fits = it->is_number_unsigned()
                          ? it->template get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                          : std::in_range<T>(it->template get<int64_t>());
    if (!fits)
      return ApiError{400, std::string("'") + name + "' is out of range for " + type_name + ": " + it->dump(), name};
  }
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
// Tokenises |text| (BOS per the model) and rejects a prompt that leaves no room to generate
// within |max_len| without tokenising past that point.
std::optional<ApiError> tokenize_prompt(const Tokenizer& tok, const std::string& text, EncodeOptions o, int32_t max_len,
                                        const char* param, std::vector<int32_t>* tokens) {
  o.add_special = true;
  o.max_tokens = size_t(max_len);
  *tokens = tok.encode(text, o);
  if (int64_t(tokens->size()) < max_len) return std::nullopt;
  const std::string count = int64_t(tokens->size()) > max_len ? "more than " + std::to_string(max_len) : std::to_string(max_len);
  return ApiError{400, "the prompt has " + count + " tokens; this server's context holds " + std::to_string(max_len) +
                           " (including at least one generated token)", param, "context_length_exceeded"};
}

std::optional<ApiError> parse_prompt(const ServerContext& ctx, const json& body, std::vector<int32_t>* tokens) {
  auto it = body.find("prompt");
  if (it == body.end()) return ApiError{400, "'prompt' is required", "prompt"};
  const Tokenizer& tok = ctx.model->tokenizer();
  EncodeOptions o;
  o.parse_special = true;  // the whole prompt is the client's: no template markers to protect
  if (it->is_string()) return tokenize_prompt(tok, it->get<std::string>(), o, ctx.max_model_len, "prompt", tokens);
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string())
    return tokenize_prompt(tok, (*it)[0].get<std::string>(), o, ctx.max_model_len, "prompt", tokens);
  if (it->is_array() && !it->empty() && std::all_of(it->begin(), it->end(), [](const json& t) { return t.is_number_integer(); })) {
    for (const auto& t : *it) {
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= tok.vocab_size())
        return ApiError{400, "'prompt' token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                 std::to_string(tok.vocab_size()) + ")", "prompt"};
      tokens->push_back(int32_t(id));
    }
    return std::nullopt;
  }
  return ApiError{400, "'prompt' must be a string, an array of one string, or an array of token ids (batched prompts are not supported; send one request each)", "prompt"};
}

std::optional<ApiError> parse_sampling(const json& body, ParsedRequest* out) {
  SamplingParams& sp = out->gen.sampling;
  sp = SamplingParams{};
  sp.temperature = 1.0f;  // OpenAI defaults: plain sampling at temperature 1
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  double temperature = 1.0, top_p = 1.0, presence = 0.0, frequency = 0.0;
  int64_t max_tokens = 16, n = 1;
  uint64_t seed = 0;  // any 64-bit pattern: negative seeds keep their two's-complement bits
  if (out->chat) max_tokens = 256;
  if (auto e = read_field(body, "temperature", "a number", &temperature)) return e;
  if (auto e = read_field(body, "top_p", "a number", &top_p)) return e;
  if (auto e = read_field(body, "presence_penalty", "a number", &presence)) return e;
  if (auto e = read_field(body, "frequency_penalty", "a number", &frequency)) return e;
  if (auto it = body.find("seed"); it != body.end() && it->is_number_integer() && !it->is_number_unsigned())
    seed = uint64_t(it->get<int64_t>());
  else if (auto e = read_field(body, "seed", "an integer", &seed)) return e;
  if (auto e = read_field(body, "max_tokens", "an integer", &max_tokens)) return e;
  if (auto e = read_field(body, "max_completion_tokens", "an integer", &max_tokens)) return e;
  if (auto e = read_field(body, "n", "an integer", &n)) return e;
  if (auto e = range_error("temperature", temperature >= 0 && temperature <= 2, "must be in [0, 2]")) return e;
  if (auto e = range_error("top_p", top_p > 0 && top_p <= 1, "must be in (0, 1]")) return e;
  if (auto e = range_error("presence_penalty", presence >= -2 && presence <= 2, "must be in [-2, 2]")) return e;
  if (auto e = range_error("frequency_penalty", frequency >= -2 && frequency <= 2, "must be in [-2, 2]")) return e;
  // Any positive count is accepted: generation ends at the context (finish_reason "length").
  if (auto e = range_error("max_tokens", max_tokens >= 1 && max_tokens <= INT32_MAX, "must be an integer in [1, 2147483647]")) return e;
  if (auto e = range_error("n", n >= 1 && n <= 16, "must be in [1, 16]")) return e;
  sp.temperature = float(temperature);
  sp.top_p = float(top_p);
  sp.presence_penalty = float(presence);
  sp.frequency_penalty = float(frequency);
  sp.seed = seed;
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

// The reasoning split's options: "reasoning_format" (llama.cpp's: none, deepseek, auto),
// "reasoning_budget" (tokens; -1 unlimited, 0 thinking off) and "chat_template_kwargs" (vLLM's,
// an object of template variables). Sets out->think (the split), |tags| (the model's thinking
// tags, which the budget and a grammar follow even when the split is off) and the template kwargs.
std::optional<ApiError> read_reasoning(const ServerContext& ctx, const json& body, ParsedRequest* out, int32_t* budget,
                                       std::optional<ThinkTags>* tags, std::string* kwargs_json) {
  std::string format = ctx.opts.reasoning_format;
  if (auto e = read_field(body, "reasoning_format", "a string", &format)) return e;
  if (format != "auto" && format != "deepseek" && format != "none")
    return ApiError{400, "'reasoning_format' is '" + format + "'; expected auto, deepseek or none", "reasoning_format"};
  *tags = format == "deepseek" ? std::optional<ThinkTags>(ThinkTags{}) : think_tags_of(ctx.model->chat_template());
  if (format != "none") out->think = *tags;
  *budget = ctx.opts.reasoning_budget;
  if (auto e = read_field(body, "reasoning_budget", "an integer", budget)) return e;
  if (auto e = range_error("reasoning_budget", *budget >= -1, "must be -1 (unlimited) or a token count >= 0")) return e;
  json kwargs = json::object();
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) return ApiError{400, "'chat_template_kwargs' must be an object", "chat_template_kwargs"};
    kwargs = *it;
  }
  // A zero budget turns thinking off the way the template knows (Qwen3/3.5: enable_thinking).
  if (*budget == 0 && !kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = false;
  if (!kwargs.empty()) *kwargs_json = kwargs.dump();
  return std::nullopt;
}

// With the thinking block open at the end of the prompt, a reasoning budget or a grammar goes
// through a ReasoningGate: the budget forces the close tag, the grammar starts after it.
void gate_reasoning(const ServerContext& ctx, int32_t budget, const std::optional<ThinkTags>& tags, bool inside,
                    ParsedRequest* out) {
  if (!tags || !inside || (budget < 0 && !out->gen.grammar) || !ctx.token_pieces) return;
  EncodeOptions o;
  o.parse_special = true;
  const std::vector<int32_t> close = ctx.model->tokenizer().encode("\n" + tags->close + "\n\n", o);
  std::unique_ptr<Grammar> inner = out->gen.grammar ? out->gen.grammar->fork() : nullptr;
  out->gen.grammar = std::make_shared<ReasoningGate>(ctx.token_pieces, *tags, budget, close, std::move(inner));
}

// The served model ids: the base model's, then each adapter's (--lora NAME=PATH).
std::string served_ids(const ServerContext& ctx, const std::vector<ServedLora>& loras) {
  std::string out = "'" + ctx.opts.model_name + "'";
  for (const ServedLora& a : loras) out += ", '" + a.name + "'";
  return out;
}

// The LoRA adapter a request runs under (docs/lora.md), in either dialect: vLLM's ("model" names
// an adapter, or the base model) or llama.cpp's ("lora": [{"id": slot, "scale": s}], where an
// adapter left out has scale 0, and another scale multiplies the one it was loaded with). One
// adapter per request.
std::optional<ApiError> select_lora(const ServerContext& ctx, const json& body, int32_t* slot, float* scale) {
  std::string model_name = ctx.opts.model_name;
  if (auto e = read_field(body, "model", "a string", &model_name)) return e;
  std::vector<ServedLora> loras;
  {
    std::lock_guard<std::mutex> lock(ctx.lora_mu);
    loras = ctx.loras;
    *slot = ctx.default_lora;  // POST /lora-adapters' choice for a request that names no adapter
    *scale = ctx.default_lora_scale;
  }
  if (model_name != ctx.opts.model_name) {
    *scale = 1.0f;  // an adapter named by "model" runs at the scale it was loaded with
    auto it = std::find_if(loras.begin(), loras.end(), [&](const ServedLora& a) { return a.name == model_name; });
    if (it == loras.end())
      return ApiError{
          404, "the model '" + model_name + "' does not exist (this server serves " + served_ids(ctx, loras) + ")",
          "model", "model_not_found"};
    *slot = it->slot;
  }
  auto it = body.find("lora");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (model_name == ctx.opts.model_name) *slot = -1;  // the request's own list decides
  if (!it->is_array())
    return ApiError{400, "'lora' must be an array of {\"id\", \"scale\"} objects, got " + std::string(it->type_name()),
                    "lora"};
  int32_t chosen = -1;
  if (auto e = choose_lora(*it, loras, 1.0, "lora: ", "lora", &chosen, scale)) return e;
  if (*slot >= 0 && chosen != *slot)
    return ApiError{
        400,
        "'model' names adapter '" + model_name + "' but 'lora' " +
            (chosen < 0 ? std::string("turns every adapter off") : "selects adapter " + std::to_string(chosen)),
        "lora"};
  *slot = chosen;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> choose_lora(const json& list, const std::vector<ServedLora>& loras, double missing_scale,
                                    const std::string& where, const std::string& param, int32_t* chosen, float* scale) {
  *chosen = -1;
  *scale = 1.0f;
  for (const json& entry : list) {
    const json::const_iterator id = entry.is_object() ? entry.find("id") : entry.end();
    const json::const_iterator s = entry.is_object() ? entry.find("scale") : entry.end();
    if (id == entry.end() || !id->is_number_integer() || (s != entry.end() && !s->is_number()))
      return ApiError{400,
                      where +
                          "each entry must be an object {\"id\": integer, \"scale\": number} (GET "
                          "/lora-adapters lists the ids)",
                      param};
    const int64_t slot = id->get<int64_t>();
    if (std::none_of(loras.begin(), loras.end(), [&](const ServedLora& a) { return a.slot == slot; }))
      return ApiError{400,
                      where + "no adapter has id " + std::to_string(slot) + " (this server has " +
                          std::to_string(loras.size()) + ": GET /lora-adapters lists them)",
                      param};
    const double v = s == entry.end() ? missing_scale : s->get<double>();
    if (v == 0.0) continue;  // off, as an adapter left out
    if (!std::isfinite(v) || std::fabs(v) > kMaxLoraScale)
      return ApiError{400,
                      where + "adapter " + std::to_string(slot) + " at scale " + s->dump() +
                          ": a scale is a finite number within +-" + std::to_string(int(kMaxLoraScale)),
                      param};
    if (*chosen >= 0 && *chosen != slot)
      return ApiError{400,
                      where + "only one adapter can be on, one adapter per request (ids " + std::to_string(*chosen) +
                          " and " + std::to_string(slot) + " have non-zero scales)",
                      param};
    *chosen = int32_t(slot);
    *scale = float(v);
  }
  return std::nullopt;
}

std::optional<ApiError> parse_request(ServerContext& ctx, const std::string& raw, ParsedRequest* out) {
  const json body = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return ApiError{400, "the request body is not valid JSON", "", "invalid_json"};
  if (!body.is_object()) return ApiError{400, "the request body must be a JSON object"};
  if (auto e = select_lora(ctx, body, &out->gen.lora, &out->gen.lora_scale)) return e;
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
  // Another: speculative decoding's draft tokens per step for this request (0: off; absent: the
  // server's --spec-k, when it runs with --spec).
  if (auto e = read_field(body, "spec_k", "an integer", &out->gen.spec_k)) return e;
  if (auto e = range_error("spec_k", out->gen.spec_k >= -1 && out->gen.spec_k <= 32, "must be in [0, 32]")) return e;
  if (auto e = parse_sampling(body, out)) return e;
  int32_t budget = -1;
  std::optional<ThinkTags> think_tags;
  bool think_inside = false;
  if (out->chat) {
    if (!body.contains("messages")) return ApiError{400, "'messages' is required", "messages"};
    json messages = body["messages"];
    if (auto e = prepare_tools(*ctx.model, body, &messages, out)) return e;
    std::string kwargs_json;
    if (auto e = read_reasoning(ctx, body, out, &budget, &think_tags, &kwargs_json)) return e;
    RenderedChat chat;
    if (auto e = render_chat(*ctx.model, messages, &chat, out->tools_json, kwargs_json)) return e;
    think_inside = think_tags && prompt_opens_thinking(chat.text, *think_tags);
    out->think_inside = out->think && think_inside;
    EncodeOptions o;
    o.parse_special = true;
    if (!ctx.opts.parse_special_in_messages) o.literal = std::move(chat.literal);
    if (auto e = tokenize_prompt(ctx.model->tokenizer(), chat.text, o, ctx.max_model_len, "messages", &out->gen.prompt)) return e;
  } else if (auto e = parse_prompt(ctx, body, &out->gen.prompt)) {
    return e;
  }
  if (auto e = prepare_grammar(ctx, body, out)) return e;
  gate_reasoning(ctx, budget, think_tags, think_inside, out);
  // Generation ends where the sequence reaches max_model_len (finish_reason "length").
  const int64_t room = int64_t(ctx.max_model_len) - int64_t(out->gen.prompt.size());
  if (room > 0) out->gen.max_tokens = int32_t(std::min<int64_t>(out->gen.max_tokens, room));
  const Status s = ctx.engine->validate(out->gen);
  if (!s.ok()) {
    const bool too_long = s.message().find("context") != std::string::npos || s.code() == StatusCode::kResourceExhausted;
    return ApiError{400, s.message(), out->chat ? "messages" : "prompt", too_long ? "context_length_exceeded" : ""};
  }
  return std::nullopt;
}

}  // namespace tessera::server

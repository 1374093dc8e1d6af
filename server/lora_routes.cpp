#include "server/lora_routes.h"

#include <httplib.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "server/errors.h"
#include "server/http.h"
#include "server/request.h"

namespace tessera::server {

using nlohmann::json;

namespace {

// An adapter that cannot be loaded is the client's problem (a bad path, another model's
// adapter, a limit reached), except our own bugs.
int load_status(const Status& s) { return s.code() == StatusCode::kInternal ? 500 : 400; }

// {"lora_name": ..., "lora_path": ...} from a body; the error to send, or nothing.
std::optional<ApiError> read_names(const std::string& raw, bool want_path, std::string* name, std::string* path) {
  const json body = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object())
    return ApiError{400, "the request body must be a JSON object", "", "invalid_json"};
  const std::string n = string_member(body, "lora_name");
  if (n.empty()) return ApiError{400, "'lora_name' must be a non-empty string", "lora_name"};
  *name = n;
  if (!want_path) return std::nullopt;
  *path = string_member(body, "lora_path");
  if (path->empty())
    return ApiError{400, "'lora_path' must be a non-empty string (a PEFT adapter folder)", "lora_path"};
  return std::nullopt;
}

// Puts |a| into the server's list, which stays in slot order.
void add_served(ServerContext& ctx, const ServedLora& a) {
  std::lock_guard<std::mutex> lock(ctx.lora_mu);
  auto at = std::find_if(ctx.loras.begin(), ctx.loras.end(), [&](const ServedLora& l) { return l.slot > a.slot; });
  ctx.loras.insert(at, a);
}

std::optional<ApiError> updates_allowed(const ServerContext& ctx) {
  if (!ctx.ready.load()) return ApiError{503, "the model is still loading", "", "loading", "server_error"};
  if (!ctx.opts.allow_runtime_lora_updates)
    return ApiError{404, "run-time LoRA updates are off: start tessera serve with --allow-runtime-lora-updates", "",
                    "not_found"};
  return std::nullopt;
}

void load_adapter(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (auto e = updates_allowed(ctx)) return send_error(ctx, res, *e);
  std::string name, path;
  if (auto e = read_names(req.body, true, &name, &path)) return send_error(ctx, res, *e);
  if (name == ctx.opts.model_name)
    return send_error(ctx, res,
                      {400, "'" + name + "' is the base model's id; give the adapter another name", "lora_name"});
  ServedLora served;
  const LoraLimits limits{ctx.opts.max_loras, ctx.opts.max_lora_rank, ctx.opts.max_cpu_loras};
  const Status s = ctx.engine->call([&](Engine&) -> Status {
    auto slot = ctx.model->add_lora(name, path, limits);
    if (!slot.ok()) return slot.status();
    const LoraAdapter& a = ctx.model->loras()[size_t(*slot)];
    served = {a.name, a.path, int32_t(*slot), a.rank, a.alpha};
    return OkStatus();
  });
  if (!s.ok()) return send_error(ctx, res, {load_status(s), s.message(), "lora_path"});
  add_served(ctx, served);
  std::fprintf(stderr, "serve: LoRA adapter '%s' (rank %d) loaded from %s into slot %d\n", name.c_str(), served.rank,
               path.c_str(), served.slot);
  res.set_content("Success: LoRA adapter '" + name + "' added successfully.", "text/plain");
}

void unload_adapter(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (auto e = updates_allowed(ctx)) return send_error(ctx, res, *e);
  std::string name, path;
  if (auto e = read_names(req.body, false, &name, &path)) return send_error(ctx, res, *e);
  ServedLora gone;
  {  // out of the list first, so no new request picks it while it goes
    std::lock_guard<std::mutex> lock(ctx.lora_mu);
    auto it = std::find_if(ctx.loras.begin(), ctx.loras.end(), [&](const ServedLora& l) { return l.name == name; });
    if (it == ctx.loras.end())
      return send_error(ctx, res, {404, "the LoRA adapter '" + name + "' is not loaded", "lora_name", "not_found"});
    if (it->slot == ctx.default_lora)
      return send_error(
          ctx, res,
          {409,
           "the LoRA adapter '" + name + "' is on for requests that name none (POST /lora-adapters): turn it off first",
           "lora_name"});
    gone = *it;
    ctx.loras.erase(it);
  }
  const Status s = ctx.engine->call([&](Engine& engine) -> Status {
    const EngineStats st = engine.stats();
    const size_t i = size_t(gone.slot);
    const int32_t users =
        (i < st.lora_running.size() ? st.lora_running[i] : 0) + (i < st.lora_waiting.size() ? st.lora_waiting[i] : 0);
    if (users > 0)
      return ResourceExhausted("the LoRA adapter '" + name + "' has " + std::to_string(users) +
                               " requests running or waiting: unload it when they are done");
    return ctx.model->remove_lora(gone.slot);
  });
  if (!s.ok()) {
    add_served(ctx, gone);
    return send_error(ctx, res, {s.code() == StatusCode::kResourceExhausted ? 409 : 500, s.message(), "lora_name"});
  }
  std::fprintf(stderr, "serve: LoRA adapter '%s' unloaded from slot %d\n", name.c_str(), gone.slot);
  res.set_content("Success: LoRA adapter '" + name + "' removed successfully.", "text/plain");
}

// llama.cpp's POST /lora-adapters: [{"id", "scale"}, ...] sets the adapter a request that names
// none runs under, and its scale (an adapter left out has scale 0). One adapter on, or none (the
// base model).
void set_global_scales(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!ctx.ready.load())
    return send_error(ctx, res, {503, "the model is still loading", "", "loading", "server_error"});
  const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_array())
    return send_error(
        ctx, res, {400, "the request body must be a JSON array of {\"id\", \"scale\"} objects", "", "invalid_json"});
  std::lock_guard<std::mutex> lock(ctx.lora_mu);
  int32_t chosen = -1;
  float chosen_scale = 1.0f;
  if (auto e = choose_lora(body, ctx.loras, 0.0, "", "lora", &chosen, &chosen_scale)) return send_error(ctx, res, *e);
  ctx.default_lora = chosen;
  ctx.default_lora_scale = chosen_scale;
  res.set_content(dump(json{{"success", true}}), "application/json");
}

}  // namespace

std::vector<json> lora_model_entries(const ServerContext& ctx) {
  std::vector<json> out;
  for (const ServedLora& a : ctx.lora_snapshot())
    out.push_back(json{{"id", a.name},
                       {"object", "model"},
                       {"created", ctx.created_base.load()},
                       {"owned_by", "tessera"},
                       {"root", a.path},
                       {"parent", ctx.opts.model_name},
                       {"max_model_len", ctx.max_model_len}});
  return out;
}

void add_lora_routes(httplib::Server& svr, ServerContext& ctx) {
  // llama.cpp's list: "id" is what a request's "lora": [{"id", "scale"}] names. The scale is the
  // one a request that names no adapter gets: 0 for all (the base model, vLLM's default) until
  // POST /lora-adapters turns one on.
  svr.Get("/lora-adapters", [&ctx](const httplib::Request&, httplib::Response& res) {
    set_connection_phase(Phase::kHandling);
    if (!ctx.ready.load())
      return send_error(ctx, res, {503, "the model is still loading", "", "loading", "server_error"});
    json list = json::array();
    std::lock_guard<std::mutex> lock(ctx.lora_mu);
    for (const ServedLora& a : ctx.loras)
      list.push_back(json{{"id", a.slot},
                          {"path", a.path},
                          {"scale", a.slot == ctx.default_lora ? double(ctx.default_lora_scale) : 0.0},
                          {"name", a.name},
                          {"rank", a.rank},
                          {"alpha", a.alpha}});
    res.set_content(dump(list), "application/json");
  });
  svr.Post("/lora-adapters", [&ctx](const httplib::Request& req, httplib::Response& res) {
    set_connection_phase(Phase::kHandling);
    set_global_scales(ctx, req, res);
  });
  svr.Post("/v1/load_lora_adapter", [&ctx](const httplib::Request& req, httplib::Response& res) {
    set_connection_phase(Phase::kHandling);
    load_adapter(ctx, req, res);
  });
  svr.Post("/v1/unload_lora_adapter", [&ctx](const httplib::Request& req, httplib::Response& res) {
    set_connection_phase(Phase::kHandling);
    unload_adapter(ctx, req, res);
  });
}

}  // namespace tessera::server

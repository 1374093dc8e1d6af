#include "server/routes.h"

#include <httplib.h>

#include <exception>
#include <nlohmann/json.hpp>

#include "server/bridge.h"
#include "server/errors.h"
#include "server/metrics.h"

namespace tessera::server {

using nlohmann::json;

void send_error(ServerContext& ctx, httplib::Response& res, const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  res.status = e.status;
  res.set_content(dump(json{{"error", err}}), "application/json");
  std::lock_guard<std::mutex> lock(ctx.mu);
  ++ctx.http_errors[e.status];
}

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

}  // namespace tessera::server

#include "server/routes.h"

#include <httplib.h>

#include <exception>
#include <string>
#include <string_view>
#include <nlohmann/json.hpp>

#include "server/access.h"
#include "server/bridge.h"
#include "server/embeddings.h"
#include "server/http.h"
#include "server/lora_routes.h"
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

namespace {

// Wraps a route handler: from here the connection has no read deadline (server/http.h).
httplib::Server::Handler handling(httplib::Server::Handler h) {
  return [h = std::move(h)](const httplib::Request& req, httplib::Response& res) {
    set_connection_phase(Phase::kHandling);
    h(req, res);
  };
}

}  // namespace

void register_routes(httplib::Server& svr, ServerContext& ctx) {
  // Headers are in, the body is due: its own deadline, then who may call at all.
  svr.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    set_connection_phase(Phase::kReadingBody);
    const auto handled = check_access(ctx, req, res);
    const bool has_body = req.get_header_value<uint64_t>("Content-Length") > 0 || req.has_header("Transfer-Encoding");
    if (handled == httplib::Server::HandlerResponse::Handled && has_body) {
      close_after_response();
      res.set_header("Connection", "close");
    }
    return handled;
  });
  // The response is written: the connection waits for the next keep-alive request.
  svr.set_logger([](const httplib::Request&, const httplib::Response&) { set_connection_phase(Phase::kAwaitingRequest); });
  // Readiness: 503 while the model loads and once SIGTERM began the drain, so a router or a
  // Kubernetes probe sends nothing new here.
  svr.Get("/health", handling([&ctx](const httplib::Request&, httplib::Response& res) {
    const char* state = !ctx.ready.load() ? "loading" : ctx.shutting_down.load() ? "shutting_down" : "ok";
    res.status = std::string_view(state) == "ok" ? 200 : 503;
    res.set_content(std::string(R"({"status":")") + state + "\"}", "application/json");
  }));
  svr.Get("/metrics", handling([&ctx](const httplib::Request&, httplib::Response& res) {
    if (!ctx.ready.load()) return send_error(ctx, res, {503, "the model is still loading", "", "loading", "server_error"});
    res.set_content(prometheus(ctx), "text/plain; version=0.0.4");
  }));
  svr.Get("/v1/models", handling([&ctx](const httplib::Request&, httplib::Response& res) {
            if (!ctx.ready.load())
              return send_error(ctx, res, {503, "the model is still loading", "", "loading", "server_error"});
            json data = json::array({json{{"id", ctx.opts.model_name},
                                          {"object", "model"},
                                          {"created", ctx.created_base.load()},
                                          {"owned_by", "tessera"},
                                          {"root", ctx.opts.model_name},
                                          {"parent", nullptr},
                                          {"max_model_len", ctx.max_model_len}}});
            for (json& m : lora_model_entries(ctx)) data.push_back(std::move(m));
            res.set_content(dump(json{{"object", "list"}, {"data", data}}), "application/json");
          }));
  add_lora_routes(svr, ctx);
  svr.Post("/v1/completions", handling([&ctx](const httplib::Request& req, httplib::Response& res) { handle_generate(ctx, false, req, res); }));
  svr.Post("/v1/chat/completions", handling([&ctx](const httplib::Request& req, httplib::Response& res) { handle_generate(ctx, true, req, res); }));
  svr.Post("/v1/embeddings", handling([&ctx](const httplib::Request& req, httplib::Response& res) { handle_embeddings(ctx, req, res); }));
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
  // httplib's own answers (no route, a body over the limit, a malformed request line) get an
  // OpenAI-shaped body too.
  svr.set_error_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler already wrote an error body
    if (res.status == 404) send_error(ctx, res, {404, "no route for " + req.method + " " + req.path, "", "not_found"});
    else if (res.status == 413)
      send_error(ctx, res, {413, "the request body is larger than this server's limit of " + std::to_string(ctx.opts.max_body_bytes) +
                                     " bytes (--max-body-bytes)", "", "request_too_large"});
    else if (res.status >= 400) send_error(ctx, res, {res.status, "malformed HTTP request", "", "bad_request"});
  });
}

}  // namespace tessera::server

#include "server/access.h"

#include <algorithm>

#include "server/errors.h"

namespace tessera::server {

namespace {

// Compares in time independent of where the strings first differ.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

bool origin_allowed(const ServeOptions& o, const std::string& origin) {
  return std::any_of(o.allowed_origins.begin(), o.allowed_origins.end(),
                     [&](const std::string& a) { return a == "*" || a == origin; });
}

}  // namespace

httplib::Server::HandlerResponse check_access(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  const ServeOptions& o = ctx.opts;
  if (req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    if (!origin_allowed(o, origin)) {
      send_error(ctx, res, {403, "requests from the browser origin '" + origin + "' are not allowed (start the server with "
                                 "--allowed-origins to allow it)", "", "origin_not_allowed", "permission_error"});
      return HR::Handled;
    }
    const bool any = std::find(o.allowed_origins.begin(), o.allowed_origins.end(), "*") != o.allowed_origins.end();
    res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
    if (!any) res.set_header("Vary", "Origin");
    if (req.method == "OPTIONS") {  // a preflight: browsers send it without credentials
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
      res.status = 204;
      return HR::Handled;
    }
  }
  if (o.api_key.empty() || (req.method == "GET" && req.path == "/health")) return HR::Unhandled;
  const std::string auth = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (auth.compare(0, prefix.size(), prefix) == 0 && same_secret(auth.substr(prefix.size()), o.api_key)) return HR::Unhandled;
  res.set_header("WWW-Authenticate", "Bearer");
  send_error(ctx, res, {401, auth.empty() ? "an API key is required (Authorization: Bearer <key>)" : "the API key is not valid",
                        "", "invalid_api_key", "invalid_request_error"});
  return HR::Handled;
}

}  // namespace tessera::server

#include "server/server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>

#include "server/context.h"
#include "server/http.h"
#include "server/routes.h"

namespace tessera::server {

Status serve(Model& model, EngineThread& engine, const ServeOptions& opts, SignalWatcher& signals) {
  ServerContext ctx{model, engine, opts};
  ctx.created_base = int64_t(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  int port = -1;
  TS_ASSIGN_OR_RETURN(auto svr, bind_http(opts, &port));
  register_routes(*svr, ctx);
  signals.start([&](int sig) {
    std::fprintf(stderr, "serve: signal %d: finishing requests in flight, then exiting\n", sig);
    ctx.shutting_down = true;
    svr->stop();  // stops accepting; listen returns once the handlers in flight are done
  });
  std::fprintf(stderr, "serve: %s on http://%s:%d\n", opts.model_name.c_str(), opts.host.c_str(), port);
  std::printf("listening on %s:%d\n", opts.host.c_str(), port);
  std::fflush(stdout);
  const bool clean = svr->listen_after_bind() || ctx.shutting_down;
  signals.stop();
  if (!clean) return Unavailable("the HTTP server stopped unexpectedly");
  return OkStatus();
}

}  // namespace tessera::server

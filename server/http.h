// HTTP setup: the httplib server with its worker pool, bound to the configured address.
#pragma once
#include <memory>

#include "core/status.h"
#include "server/options.h"

namespace httplib { class Server; }

namespace tessera::server {

// A server with |opts|' worker threads, bound (not yet listening) to opts.host:opts.port; the
// bound port (the chosen one for port 0) in |port|. Errors name the address.
Result<std::unique_ptr<httplib::Server>> bind_http(const ServeOptions& opts, int* port);

}  // namespace tessera::server

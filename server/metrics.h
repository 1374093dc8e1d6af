// GET /metrics: the engine's stats and the completed-request counters as Prometheus text.
#pragma once
#include <string>

#include "server/context.h"

namespace tessera::server {

std::string prometheus(ServerContext& ctx);

}  // namespace tessera::server

// tessera_server: an OpenAI-compatible HTTP server over one model, with continuous batching
// through an EngineThread. `tessera serve` (examples/cli/serve.cpp) loads the model, builds the
// engine and calls serve().
#pragma once
#include "core/sched/engine_thread.h"
#include "core/status.h"
#include "models/model.h"
#include "server/options.h"
#include "server/signals.h"

namespace tessera::server {

// Binds opts.host:opts.port, prints "listening on HOST:PORT" on stdout (scripts wait for that
// line) and serves |model| through |engine| until SIGTERM/SIGINT arrive through |signals|: then
// it stops accepting and finishes the requests in flight. |signals| must have been created
// before any thread started. An error when it cannot listen or the server stops by itself.
Status serve(Model& model, EngineThread& engine, const ServeOptions& opts, SignalWatcher& signals);

}  // namespace tessera::server

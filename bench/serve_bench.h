// `tessera-bench serve` internals shared by the load levels (serve_bench.cpp) and the prefix and
// chunked-prefill scenarios (serve_scenarios.cpp).
#pragma once
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/commands.h"
#include "bench/serve_client.h"

namespace tessera::bench {

// p50/p99/mean/max of a sample (linear interpolation between closest ranks, as numpy does).
struct Percentiles {
  double p50 = 0, p99 = 0, mean = 0, max = 0;
  int n = 0;
};
Percentiles percentiles(std::vector<double> v);
nlohmann::json to_json(const Percentiles& p);

// Where the requests go: a server this run started (owned) or an existing one.
struct Target {
  std::string host;
  int port = 0;
  std::unique_ptr<ServerProcess> owned;
};
// Starts a server from a.model (with |extra| server arguments after a.server_args) or connects
// to a.url; then sends one short warm-up request (first-call costs are not measured).
Result<Target> open_target(const ServeBenchArgs& a, const std::vector<std::string>& extra = {});

// |n| random token ids in [a.token_lo, a.token_hi).
std::vector<int32_t> random_tokens(const ServeBenchArgs& a, std::mt19937_64& rng, int n);

// The scenarios: each returns its report section ("scenario" object) or an error.
Result<nlohmann::json> run_prefix_scenario(const ServeBenchArgs& a);
Result<nlohmann::json> run_chunked_scenario(const ServeBenchArgs& a);

}  // namespace tessera::bench

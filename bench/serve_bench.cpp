// `tessera-bench serve`: closed-loop load levels against a `tessera serve` over loopback. At each
// concurrency level c, c client threads each send their next streamed request as soon as the
// previous one ends, until the level's requests are done. Every figure is measured on the client:
// TTFT (send -> first token), TPOT ((last - first token) / (tokens - 1)), ITL (gaps between
// consecutive tokens), E2E (send -> last token); goodput counts the requests meeting both SLOs.
#include "bench/serve_bench.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "bench/report.h"

namespace tessera::bench {

using nlohmann::json;

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.n = int(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * double(v.size() - 1);
    const size_t lo = size_t(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  p.mean = sum / double(v.size());
  return p;
}

json to_json(const Percentiles& p) { return {{"p50", p.p50}, {"p99", p.p99}, {"mean", p.mean}, {"max", p.max}, {"n", p.n}}; }

std::vector<int32_t> random_tokens(const ServeBenchArgs& a, std::mt19937_64& rng, int n) {
  std::uniform_int_distribution<int32_t> d(a.token_lo, a.token_hi - 1);
  std::vector<int32_t> out(size_t(std::max(n, 0)));
  for (auto& t : out) t = d(rng);
  return out;
}

namespace {

std::string default_server_bin() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("tessera") : (self.parent_path() / "tessera").string();
}

int length_in(std::mt19937_64& rng, int mean, double spread) {
  const int lo = std::max(1, int(std::lround(mean * (1.0 - spread))));
  const int hi = std::max(lo, int(std::lround(mean * (1.0 + spread))));
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

struct LevelResult {
  int concurrency = 0;
  int requests = 0, completed = 0, met_slo = 0;
  std::vector<std::string> errors;  // the first few
  double duration_s = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  Percentiles ttft, tpot, itl, e2e;
};

// Runs |reqs| with |c| client threads, each starting its next request when its last one ends.
LevelResult run_level(const ServeBenchArgs& a, const Target& t, int c, const std::vector<StreamRequest>& reqs) {
  std::vector<StreamResult> results(reqs.size());
  std::atomic<size_t> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < c; ++w)
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < reqs.size();) results[i] = stream_completion(t.host, t.port, reqs[i]);
    });
  for (auto& w : workers) w.join();
  LevelResult lr;
  lr.concurrency = c;
  lr.requests = int(reqs.size());
  lr.duration_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : results) {
    if (!r.ok) {
      if (lr.errors.size() < 5) lr.errors.push_back(r.error);
      continue;
    }
    ++lr.completed;
    lr.input_tokens += r.prompt_tokens;
    lr.output_tokens += r.completion_tokens;
    ttft.push_back(r.ttft_ms());
    e2e.push_back(r.e2e_ms());
    if (r.token_times.size() >= 2) tpot.push_back(r.tpot_ms());
    for (double x : r.itl_ms()) itl.push_back(x);
    if (r.ttft_ms() <= a.slo_ttft_ms && r.tpot_ms() <= a.slo_tpot_ms) ++lr.met_slo;
  }
  lr.ttft = percentiles(ttft);
  lr.tpot = percentiles(tpot);
  lr.itl = percentiles(itl);
  lr.e2e = percentiles(e2e);
  return lr;
}

json level_json(const LevelResult& l) {
  const double d = l.duration_s > 0 ? l.duration_s : 1e-9;
  return {{"concurrency", l.concurrency},
          {"requests", l.requests},
          {"completed", l.completed},
          {"failed", l.requests - l.completed},
          {"errors", l.errors},
          {"duration_s", l.duration_s},
          {"requests_per_s", l.completed / d},
          {"input_tokens", l.input_tokens},
          {"output_tokens", l.output_tokens},
          {"output_tokens_per_s", double(l.output_tokens) / d},
          {"ttft_ms", to_json(l.ttft)},
          {"tpot_ms", to_json(l.tpot)},
          {"itl_ms", to_json(l.itl)},
          {"e2e_ms", to_json(l.e2e)},
          {"met_slo", l.met_slo},
          {"goodput_requests_per_s", l.met_slo / d}};
}

std::string levels_csv(const json& levels) {
  std::string out =
      "concurrency,requests,completed,duration_s,requests_per_s,output_tokens_per_s,ttft_p50_ms,ttft_p99_ms,tpot_p50_ms,"
      "tpot_p99_ms,itl_p50_ms,itl_p99_ms,e2e_p50_ms,e2e_p99_ms,goodput_requests_per_s\n";
  char buf[512];
  for (const auto& l : levels) {
    std::snprintf(buf, sizeof buf, "%d,%d,%d,%.3f,%.4f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.4f\n",
                  l["concurrency"].get<int>(), l["requests"].get<int>(), l["completed"].get<int>(),
                  l["duration_s"].get<double>(), l["requests_per_s"].get<double>(), l["output_tokens_per_s"].get<double>(),
                  l["ttft_ms"]["p50"].get<double>(), l["ttft_ms"]["p99"].get<double>(), l["tpot_ms"]["p50"].get<double>(),
                  l["tpot_ms"]["p99"].get<double>(), l["itl_ms"]["p50"].get<double>(), l["itl_ms"]["p99"].get<double>(),
                  l["e2e_ms"]["p50"].get<double>(), l["e2e_ms"]["p99"].get<double>(),
                  l["goodput_requests_per_s"].get<double>());
    out += buf;
  }
  return out;
}

void print_levels(const json& levels, const ServeBenchArgs& a) {
  std::printf("%5s %9s %7s %9s %17s %17s %17s %17s %13s\n", "conc", "done", "req/s", "out tok/s", "TTFT p50/p99 ms",
              "TPOT p50/p99 ms", "ITL p50/p99 ms", "E2E p50/p99 ms", "goodput req/s");
  for (const auto& l : levels) {
    char done[32], t[4][40];
    std::snprintf(done, sizeof done, "%d/%d", l["completed"].get<int>(), l["requests"].get<int>());
    const char* keys[4] = {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"};
    for (int k = 0; k < 4; ++k)
      std::snprintf(t[k], sizeof t[k], "%.1f/%.1f", l[keys[k]]["p50"].get<double>(), l[keys[k]]["p99"].get<double>());
    std::printf("%5d %9s %7.2f %9.1f %17s %17s %17s %17s %13.2f\n", l["concurrency"].get<int>(), done,
                l["requests_per_s"].get<double>(), l["output_tokens_per_s"].get<double>(), t[0], t[1], t[2], t[3],
                l["goodput_requests_per_s"].get<double>());
    for (const auto& e : l["errors"]) std::printf("      error: %s\n", e.get<std::string>().c_str());
  }
  std::printf("(client-side figures; goodput: requests with TTFT <= %.0f ms and TPOT <= %.0f ms, per second)\n",
              a.slo_ttft_ms, a.slo_tpot_ms);
}

Result<json> run_load(const ServeBenchArgs& a) {
  TS_ASSIGN_OR_RETURN(Target t, open_target(a));
  json levels = json::array();
  std::mt19937_64 rng(a.seed);
  for (int c : a.concurrency) {
    const int n = a.requests > 0 ? a.requests : std::max(8, 4 * c);
    std::vector<StreamRequest> reqs(static_cast<size_t>(n));
    for (size_t i = 0; i < reqs.size(); ++i) {
      StreamRequest& r = reqs[i];
      r.prompt = random_tokens(a, rng, length_in(rng, a.prompt_len, a.prompt_spread));
      r.max_tokens = length_in(rng, a.output_len, a.output_spread);
      r.seed = rng();
      if (a.request_loras > 0) r.lora = int(i % size_t(a.request_loras));
    }
    std::fprintf(stderr, "tessera-bench serve: concurrency %d, %d requests\n", c, n);
    levels.push_back(level_json(run_level(a, t, c, reqs)));
  }
  if (t.owned) t.owned->stop();
  return levels;
}

Status check_args(const ServeBenchArgs& a) {
  if (a.model.empty() == a.url.empty()) return InvalidArgument("tessera-bench serve: give exactly one of --model or --url");
  if (a.scenario != "load" && a.scenario != "prefix" && a.scenario != "chunked")
    return InvalidArgument("tessera-bench serve: unknown --scenario '" + a.scenario + "' (load, prefix or chunked)");
  if (a.scenario != "load" && a.model.empty())
    return InvalidArgument("tessera-bench serve: --scenario " + a.scenario +
                           " needs --model (it starts its own servers, e.g. one without prefix caching)");
  if (a.token_lo < 0 || a.token_hi <= a.token_lo)
    return InvalidArgument("tessera-bench serve: --token-range must be LO < HI, got " + std::to_string(a.token_lo) + "," +
                           std::to_string(a.token_hi));
  for (int c : a.concurrency)
    if (c < 1 || c > 4096) return InvalidArgument("tessera-bench serve: --concurrency " + std::to_string(c) + " out of [1, 4096]");
  if (a.prompt_spread < 0 || a.prompt_spread >= 1 || a.output_spread < 0 || a.output_spread >= 1)
    return InvalidArgument("tessera-bench serve: spreads must be in [0, 1)");
  return OkStatus();
}

}  // namespace

Result<Target> open_target(const ServeBenchArgs& a, const std::vector<std::string>& extra) {
  Target t;
  if (!a.url.empty()) {
    TS_RETURN_IF_ERROR(parse_url(a.url, &t.host, &t.port));
  } else {
    std::vector<std::string> args = {"-d", a.device};
    args.insert(args.end(), a.server_args.begin(), a.server_args.end());
    args.insert(args.end(), extra.begin(), extra.end());
    TS_ASSIGN_OR_RETURN(t.owned, ServerProcess::start(a.server_bin.empty() ? default_server_bin() : a.server_bin, a.model, args));
    t.host = t.owned->host();
    t.port = t.owned->port();
  }
  std::mt19937_64 rng(a.seed ^ 0x5eedULL);
  StreamRequest warm;
  warm.prompt = random_tokens(a, rng, 16);
  warm.max_tokens = 4;
  const StreamResult r = stream_completion(t.host, t.port, warm);
  if (!r.ok) return Unavailable("tessera-bench serve: warm-up request to " + t.host + ":" + std::to_string(t.port) + " failed: " + r.error);
  return t;
}

int run_serve_bench(const ServeBenchArgs& a) {
  if (Status s = check_args(a); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  json report = {{"schema_version", 1},
                 {"tool", "tessera-bench serve"},
                 {"created", utc_now()},
                 {"host", host_description()},
                 {"scenario", a.scenario},
                 {"target", a.url.empty() ? a.model : a.url},
                 {"server_args", a.server_args},
                 {"config",
                  {{"device", a.device},
                   {"prompt_len", a.prompt_len},
                   {"prompt_spread", a.prompt_spread},
                   {"output_len", a.output_len},
                   {"output_spread", a.output_spread},
                   {"token_range", {a.token_lo, a.token_hi}},
                   {"seed", a.seed},
                   {"request_loras", a.request_loras},
                   {"slo_ttft_ms", a.slo_ttft_ms},
                   {"slo_tpot_ms", a.slo_tpot_ms}}}};
  Result<json> body = a.scenario == "prefix"  ? run_prefix_scenario(a)
                      : a.scenario == "chunked" ? run_chunked_scenario(a)
                                                : run_load(a);
  if (!body.ok()) {
    std::fprintf(stderr, "%s\n", body.status().message().c_str());
    return 1;
  }
  const std::string stem = a.scenario == "load" ? "serve" : "serve-" + a.scenario;
  std::error_code ec;
  std::filesystem::create_directories(a.out_dir, ec);
  std::string csv;
  if (a.scenario == "load") {
    report["levels"] = *body;
    print_levels(*body, a);
    csv = levels_csv(*body);
  } else {
    report["result"] = *body;
    std::printf("%s\n", body->dump(2).c_str());
    csv = "key,value\n";
    for (const auto& [k, v] : body->items())
      if (v.is_primitive()) csv += k + "," + v.dump() + "\n";
  }
  const std::string base = (std::filesystem::path(a.out_dir) / stem).string();
  for (const Status& s : {write_file(base + ".json", report.dump(2) + "\n"), write_file(base + ".csv", csv)})
    if (!s.ok()) {
      std::fprintf(stderr, "tessera-bench serve: %s\n", s.message().c_str());
      return 1;
    }
  std::printf("wrote %s.json and %s.csv\n", base.c_str(), base.c_str());
  // The run failed if any request did (a benchmark of a server that drops requests is no figure).
  if (a.scenario == "load")
    for (const auto& l : *body)
      if (l["failed"].get<int>() > 0) return 1;
  if (body->contains("pass") && !(*body)["pass"].get<bool>()) return 3;
  return 0;
}

}  // namespace tessera::bench

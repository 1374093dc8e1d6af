// The serving scenarios of `tessera-bench serve`, each a figure of issue #4:
// - prefix:  a request sharing a long prefix with earlier ones (--warm, default 2: a hybrid
//            model's state is checkpointed where two prompts part) computes only its suffix, gives
//            the output a server without prefix caching gives, and its TTFT drops (>= 5x).
// - chunked: a long prompt arriving during streaming decodes keeps their worst inter-token
//            latency under 3x their median (chunked prefill under a per-step token budget).
#include <algorithm>
#include <cstdio>
#include <thread>

#include "bench/serve_bench.h"

namespace tessera::bench {

using nlohmann::json;

namespace {

std::vector<int32_t> concat(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  std::vector<int32_t> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

Result<StreamResult> must(StreamResult r, const char* what) {
  if (!r.ok) return Unavailable(std::string("tessera-bench serve: ") + what + " failed: " + r.error);
  return r;
}

double ms_since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

}  // namespace

Result<json> run_prefix_scenario(const ServeBenchArgs& a) {
  std::mt19937_64 rng(a.seed);
  struct Round {
    std::vector<int32_t> prefix, second;  // prefix + each of |warm| warms the cache; prefix + second is measured
    std::vector<std::vector<int32_t>> warm;
  };
  std::vector<Round> rounds(size_t(std::max(1, a.rounds)));
  for (auto& r : rounds) {
    r.prefix = random_tokens(a, rng, a.prefix_len);
    for (int i = 0; i < std::max(1, a.warm); ++i) r.warm.push_back(random_tokens(a, rng, a.suffix_len));
    r.second = random_tokens(a, rng, a.suffix_len);
  }
  auto request = [&](const std::vector<int32_t>& prompt) {
    StreamRequest q;
    q.prompt = prompt;
    q.max_tokens = a.output_len;
    q.temperature = 0.0;  // greedy: the outputs with and without the cache must be identical
    return q;
  };
  std::vector<double> cold, cached, uncached;
  std::vector<int> cached_tokens, computed_tokens;
  bool identical = true;
  std::vector<std::vector<std::string>> with_cache;
  {
    TS_ASSIGN_OR_RETURN(Target t, open_target(a));
    for (const auto& r : rounds) {
      TS_ASSIGN_OR_RETURN(auto c, must(stream_completion(t.host, t.port, request(concat(r.prefix, r.warm[0]))), "cold request"));
      for (size_t i = 1; i < r.warm.size(); ++i)
        TS_RETURN_IF_ERROR(must(stream_completion(t.host, t.port, request(concat(r.prefix, r.warm[i]))), "warm request").status());
      TS_ASSIGN_OR_RETURN(auto w, must(stream_completion(t.host, t.port, request(concat(r.prefix, r.second))), "cached request"));
      cold.push_back(c.ttft_ms());
      cached.push_back(w.ttft_ms());
      cached_tokens.push_back(w.cached_tokens);
      computed_tokens.push_back(w.prompt_tokens - w.cached_tokens);
      with_cache.push_back(w.tokens);
    }
  }
  {
    TS_ASSIGN_OR_RETURN(Target t, open_target(a, {"--no-prefix-caching"}));
    for (size_t i = 0; i < rounds.size(); ++i) {
      const auto& r = rounds[i];
      TS_ASSIGN_OR_RETURN(auto u, must(stream_completion(t.host, t.port, request(concat(r.prefix, r.second))), "uncached request"));
      uncached.push_back(u.ttft_ms());
      if (u.tokens != with_cache[i]) identical = false;
    }
  }
  const Percentiles pc = percentiles(cold), pw = percentiles(cached), pu = percentiles(uncached);
  const double speedup = pw.p50 > 0 ? pu.p50 / pw.p50 : 0.0;
  const int min_cached = *std::min_element(cached_tokens.begin(), cached_tokens.end());
  const int max_computed = *std::max_element(computed_tokens.begin(), computed_tokens.end());
  // Prefix blocks are whole blocks (16 tokens by default): all of the prefix but its partial
  // last block must come from the cache; a hybrid model's recurrent state is restored on 64-token
  // units (SchedulerConfig::state_align), so up to 63 tokens of the prefix may be computed again.
  const bool only_suffix = min_cached >= a.prefix_len - 64;
  return json{{"prefix_len", a.prefix_len},
              {"suffix_len", a.suffix_len},
              {"warm_requests", std::max(1, a.warm)},
              {"output_len", a.output_len},
              {"rounds", int(rounds.size())},
              {"ttft_cold_ms", to_json(pc)},
              {"ttft_cached_ms", to_json(pw)},
              {"ttft_no_prefix_caching_ms", to_json(pu)},
              {"ttft_speedup", speedup},
              {"ttft_speedup_vs_cold", pw.p50 > 0 ? pc.p50 / pw.p50 : 0.0},
              {"cached_tokens_min", min_cached},
              {"computed_tokens_max", max_computed},
              {"outputs_identical", identical},
              {"pass", identical && only_suffix && speedup >= 5.0}};
}

namespace {

// ITL figures of the decode streams: gaps whose later token arrived before the long request was
// sent (|before|), and those from then until the first token of each stream after the long
// request's first token (|during|: the steps that carried its prefill chunks).
void split_itl(const std::vector<StreamResult>& decodes, Clock::time_point sent, Clock::time_point done,
               std::vector<double>* before, std::vector<double>* during, std::vector<double>* all) {
  for (const auto& d : decodes) {
    bool closed = false;
    for (size_t i = 1; i < d.token_times.size(); ++i) {
      const double gap = ms_since(d.token_times[i - 1], d.token_times[i]);
      all->push_back(gap);
      if (d.token_times[i] <= sent) {
        before->push_back(gap);
      } else if (!closed) {
        during->push_back(gap);
        closed = d.token_times[i] >= done;
      }
    }
  }
}

}  // namespace

Result<json> run_chunked_scenario(const ServeBenchArgs& a) {
  TS_ASSIGN_OR_RETURN(Target t, open_target(a));
  std::mt19937_64 rng(a.seed);
  const int n = std::max(1, a.decodes);
  std::vector<StreamRequest> reqs(static_cast<size_t>(n));
  for (auto& r : reqs) {
    r.prompt = random_tokens(a, rng, 32);
    r.max_tokens = 2048;  // ended by the client (disconnect cancels) once the long prompt is done
  }
  StreamRequest long_req;
  long_req.prompt = random_tokens(a, rng, a.long_prompt);
  long_req.max_tokens = 1;
  std::vector<StreamResult> results(static_cast<size_t>(n));
  std::vector<std::atomic<int>> progress(static_cast<size_t>(n));
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] { results[size_t(i)] = stream_completion(t.host, t.port, reqs[size_t(i)], &stop, &progress[size_t(i)]); });
  // Steady decoding first: every stream has a few tokens (a baseline of plain decode steps).
  auto min_progress = [&] {
    int m = 1 << 30;
    for (auto& p : progress) m = std::min(m, p.load());
    return m;
  };
  const auto wait_until = Clock::now() + std::chrono::seconds(300);
  while (min_progress() < 16 && Clock::now() < wait_until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const StreamResult lr = stream_completion(t.host, t.port, long_req);
  const Clock::time_point done = lr.token_times.empty() ? Clock::now() : lr.token_times.front();
  // A few more plain decode steps after it, then the streams end.
  const int after = min_progress() + 8;
  const auto after_until = Clock::now() + std::chrono::seconds(120);
  while (min_progress() < after && Clock::now() < after_until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop = true;
  for (auto& th : threads) th.join();
  if (!lr.ok) return Unavailable("tessera-bench serve: the long request failed: " + lr.error);
  for (const auto& r : results)
    if (!r.ok) return Unavailable("tessera-bench serve: a decode stream failed: " + r.error);
  std::vector<double> before, during, all;
  split_itl(results, lr.sent, done, &before, &during, &all);
  const Percentiles pb = percentiles(before), pd = percentiles(during), pa = percentiles(all);
  const double worst_over_median = pa.p50 > 0 ? pd.max / pa.p50 : 0.0;
  const double worst_over_decode_median = pb.p50 > 0 ? pd.max / pb.p50 : 0.0;
  return json{{"decodes", n},
              {"long_prompt", a.long_prompt},
              {"long_prompt_tokens", lr.prompt_tokens},
              {"long_ttft_ms", lr.ttft_ms()},
              {"itl_before_ms", to_json(pb)},
              {"itl_during_ms", to_json(pd)},
              {"itl_all_ms", to_json(pa)},
              {"worst_itl_during_ms", pd.max},
              {"worst_over_median", worst_over_median},
              {"worst_over_decode_only_median", worst_over_decode_median},
              {"pass", pd.n > 0 && worst_over_median < 3.0}};
}

}  // namespace tessera::bench

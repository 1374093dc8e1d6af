// `tessera-bench model MODEL`: prefill and decode tokens/s through the engine at batch 1 and
// under concurrency, for each thread count, with decode as a share of the bandwidth roofline
// (weight bytes read per token / measured peak read bandwidth) and prefill as a share of the
// compute roofline (2 x parameters FLOPs per token / the oneDNN int8 or f32 GEMM peak).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "bench/ceilings.h"
#include "bench/commands.h"
#include "bench/cpu_isa.h"
#include "bench/model_run.h"
#include "core/exec/executor.h"
#include "core/registry.h"
#include "core/sched/engine.h"
#include "models/gguf/gguf.h"
#include "models/model.h"

namespace tessera::bench {

// Weight bytes one decode step reads: every tensor once, except that the token embedding is
// read for one row only (unless it is also the output head). KV reads are not counted (they are
// small at the short contexts measured here).
double weight_bytes_per_token(const Model& m) {
  double bytes = 0;
  for (const Tensor* t : m.weight_tensors()) {
    if (t->name == "token_embd.weight" && !m.config().tied_output) {
      bytes += double(t->nbytes()) / double(t->shape[0]);
      continue;
    }
    bytes += double(t->nbytes());
  }
  return bytes;
}

double parameters(const Model& m) {
  double n = 0;
  for (const Tensor* t : m.weight_tensors()) {
    if (t->name != "token_embd.weight" || m.config().tied_output) n += double(t->numel());
  }
  return n;
}

Result<RunResult> run_requests(Model& m, int n_seqs, int prompt, int decode) {
  TS_ASSIGN_OR_RETURN(auto kv, m.create_kv_cache(int64_t(n_seqs) * (prompt + decode + 16), DType::kF16, 16, /*window_memory=*/true));
  EngineConfig ec;
  ec.scheduler.max_batch_tokens = 512;
  // Host overhead: for each decode-only step that follows another step, its period (previous
  // step's end to its end) against the device time the executor measured in between.
  const Executor& exec = m.device().executor();
  const ExecutorStats before = exec.stats();
  double period_s = 0, device_s = 0, last_device = before.device_seconds;
  auto last_end = std::chrono::steady_clock::now();
  bool have_last = false;
  ec.on_step = [&](const StepRecord& r) {
    const auto now = std::chrono::steady_clock::now();
    const double dev = exec.stats().device_seconds;
    if (have_last && r.prefill_tokens == 0) {
      period_s += std::chrono::duration<double>(now - last_end).count();
      device_s += dev - last_device;
    }
    last_end = now;
    last_device = dev;
    have_last = true;
  };
  Engine engine(m, *kv, m.codec(), ec);
  std::vector<RequestMetrics> metrics;
  for (int s = 0; s < n_seqs; ++s) {
    GenerationRequest r;
    for (int i = 0; i < prompt; ++i) r.prompt.push_back((i * 131 + s * 17 + 7) % std::min(m.vocab_size(), 256));
    r.sampling = SamplingParams::greedy();
    r.max_tokens = decode;
    r.ignore_eos = true;
    r.on_token = [&metrics](const TokenEvent& ev) {
      if (ev.metrics) metrics.push_back(*ev.metrics);
    };
    TS_RETURN_IF_ERROR(engine.submit(std::move(r)).status());
  }
  const auto t0 = std::chrono::steady_clock::now();
  TS_RETURN_IF_ERROR(engine.run_until_idle());
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RunResult out;
  std::vector<double> ttft, tpot;
  for (const auto& x : metrics) {
    ttft.push_back(x.ttft_ms);
    tpot.push_back(x.tpot_ms);
  }
  std::sort(ttft.begin(), ttft.end());
  std::sort(tpot.begin(), tpot.end());
  if (!ttft.empty() && ttft[ttft.size() / 2] > 0) out.prefill_tps = 1000.0 * prompt / ttft[ttft.size() / 2];
  if (!tpot.empty() && tpot[tpot.size() / 2] > 0) out.decode_tps = 1000.0 / tpot[tpot.size() / 2];
  out.aggregate_tps = double(n_seqs) * (prompt + decode) / wall;
  out.steps = engine.stats().sched.steps;
  out.wall_s = wall;
  if (period_s > 0) out.host_overhead = std::max(0.0, 1.0 - device_s / period_s);
  out.executables_built = exec.stats().built - before.built;
  out.executables_reused = exec.stats().reused - before.reused;
  return out;
}

int run_model_bench(const ModelBenchArgs& a) {
  if (!force_cpu_isa(a.isa)) return 1;
  const size_t n = (size_t(512) << 20) / sizeof(float);
  float* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (!buf) return 1;
  std::printf("model: %s\n", a.model.c_str());
  std::printf("%-7s %-11s %12s %12s %10s %12s %10s\n", "threads", "concurrency", "prefill t/s", "decode t/s",
              "%bw roof", "aggregate t/s", "%fl roof");
  bool touched = false;
  for (int t : a.threads) {
    const Stat bw = cpu_read_bandwidth(buf, n, t, !touched, 5);
    touched = true;
    auto peak = onednn_gemm_gflops("int8", 1024, t, 3);
    auto dev = make_cpu_device(t);
    LoadOptions lo;
    auto m = Model::load(a.model, dev, lo);
    if (!m.ok()) {
      std::fprintf(stderr, "tessera-bench: %s\n", m.status().to_string().c_str());
      std::free(buf);
      return 1;
    }
    const double bytes = weight_bytes_per_token(**m), params = parameters(**m);
    for (int c : a.concurrency) {
      std::vector<double> pre, dec, agg, host;
      int64_t built = 0, reused = 0;
      for (int rep = 0; rep < a.repeats; ++rep) {
        auto r = run_requests(**m, c, a.prompt, a.decode);
        if (!r.ok()) {
          std::fprintf(stderr, "tessera-bench: %s\n", r.status().to_string().c_str());
          std::free(buf);
          return 1;
        }
        pre.push_back(r->prefill_tps);
        dec.push_back(r->decode_tps);
        agg.push_back(r->aggregate_tps);
        host.push_back(r->host_overhead);
        built += r->executables_built;
        reused += r->executables_reused;
      }
      const double d = median_of(dec), p = median_of(pre);
      const double bw_pct = bw.median > 0 ? 100.0 * d * bytes / 1e9 / bw.median : 0.0;
      const double fl_pct = peak.ok() && peak->median > 0 ? 100.0 * p * 2.0 * params / 1e9 / peak->median : 0.0;
      std::printf("%-7d %-11d %12.1f %12.1f %9.1f%% %12.1f %9.1f%%\n", t, c, p, d, bw_pct, median_of(agg), fl_pct);
      std::printf("        host overhead: %.1f%% of the decode step (executables built %lld, reused %lld)\n",
                  100.0 * median_of(host), static_cast<long long>(built), static_cast<long long>(reused));
    }
    std::printf("        (threads %d: peak read %.1f GB/s%s, int8 GEMM peak %s, %.0f MB of weights per decode token)\n", t,
                bw.median, bw.noisy ? " noisy" : "",
                peak.ok() ? (std::to_string(int(peak->median)) + " GFLOP/s").c_str() : "n/a", bytes / 1e6);
  }
  std::free(buf);
  return 0;
}

}  // namespace tessera::bench

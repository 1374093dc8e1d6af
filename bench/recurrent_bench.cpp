// The recurrent subcommand: one Gated DeltaNet layer's recurrent ops over a sequence's prefill,
// through the HAL. ssm_conv over the conv channels (2 Hk Dk + Hv Dv, kernel 4, SiLU), then the
// gated delta rule, at Qwen3.5-2B's heads by default (16 key and 16 value heads of 128). On the
// CPU the delta rule is timed in both of its forms, alternating call by call: token by token
// (TESSERA_CPU_GDN_CHUNKED=0) and chunked however short the run (=1). Prints medians of wall time and of CPU
// time / threads (the unloaded estimate on a shared machine) and the ratio of the two forms.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/commands.h"
#include "bench/model_run.h"
#include "bench/timing.h"
#include "core/registry.h"

namespace tessera::bench {
namespace {

// An f32 device tensor of |shape|, uniform in [lo, hi).
Result<Tensor> uniform(Device& dev, const std::vector<int64_t>& shape, float lo, float hi, std::mt19937& rng) {
  const Tensor desc = Tensor::make(DType::kF32, int(shape.size()), shape.data());
  std::vector<float> v(static_cast<size_t>(desc.numel()));
  std::uniform_real_distribution<float> u(lo, hi);
  for (float& x : v) x = u(rng);
  return upload_new(dev, desc, v.data());
}

Result<Tensor> i32_tensor(Device& dev, const std::vector<int32_t>& v) {
  const int64_t n = int64_t(v.size());
  return upload_new(dev, Tensor::make(DType::kI32, 1, &n), v.data());
}

struct Timing {
  std::vector<double> wall, cpu;
};

// One timed call of |g| (after the caller's warm-up).
Status time_call(Device& dev, Graph& g, int threads, Timing& t) {
  const double c0 = process_cpu_seconds(), t0 = now_seconds();
  TS_RETURN_IF_ERROR(dev.compute(g));
  TS_RETURN_IF_ERROR(dev.synchronize());
  t.wall.push_back(now_seconds() - t0);
  t.cpu.push_back((process_cpu_seconds() - c0) / threads);
  return OkStatus();
}

void print(const char* what, const Timing& t, int64_t tokens) {
  const double w = median_of(t.wall), c = median_of(t.cpu);
  std::printf("%-28s wall %9.3f ms (%8.0f tok/s) | cpu-time/threads %9.3f ms (%8.0f tok/s)\n", what, w * 1e3,
              double(tokens) / std::max(w, 1e-12), c * 1e3, double(tokens) / std::max(c, 1e-12));
}

// Sets TESSERA_CPU_GDN_CHUNKED for the next call: 0 token by token, 1 chunked.
void set_form(const char* value) { setenv("TESSERA_CPU_GDN_CHUNKED", value, 1); }

}  // namespace

int run_recurrent_bench(const RecurrentBenchArgs& a) {
  if (a.tokens < 1 || a.repeats < 1 || a.hk < 1 || a.hv < a.hk || a.hv % a.hk != 0 || a.dk < 1 || a.dv < 1) {
    std::fprintf(stderr, "tessera-bench recurrent: need --tokens, --repeats >= 1 and value heads a multiple of key heads\n");
    return 2;
  }
  Result<DevicePtr> devr = a.device == "cpu" ? Result<DevicePtr>(make_cpu_device(a.threads)) : Registry::global().find(a.device);
  if (!devr.ok()) {
    std::fprintf(stderr, "tessera-bench recurrent: %s\n", devr.status().to_string().c_str());
    return 1;
  }
  Device& dev = **devr;
  const int threads = std::max(1, dev.info().threads);
  const bool cpu = dev.info().id == "cpu";
  const std::string saved = std::getenv("TESSERA_CPU_GDN_CHUNKED") ? std::getenv("TESSERA_CPU_GDN_CHUNKED") : "";
  const int64_t T = a.tokens, Hk = a.hk, Hv = a.hv, Dk = a.dk, Dv = a.dv, C = 2 * Hk * Dk + Hv * Dv, K = 4;
  std::printf("%s (%s), %d thread%s; one sequence of %lld tokens; heads %lld/%lld x %lld/%lld; conv %lld channels; medians of %d\n",
              dev.info().id.c_str(), dev.info().name.c_str(), threads, threads == 1 ? "" : "s", (long long)T,
              (long long)Hk, (long long)Hv, (long long)Dk, (long long)Dv, (long long)C, a.repeats);
  std::mt19937 rng(7);
  auto run = [&]() -> Status {
    TS_ASSIGN_OR_RETURN(Tensor x, uniform(dev, {T, C}, -1.0f, 1.0f, rng));
    TS_ASSIGN_OR_RETURN(Tensor w, uniform(dev, {C, K}, -0.5f, 0.5f, rng));
    TS_ASSIGN_OR_RETURN(Tensor cst, uniform(dev, {1, K - 1, C}, -1.0f, 1.0f, rng));
    TS_ASSIGN_OR_RETURN(Tensor q, uniform(dev, {T, Hk, Dk}, -1.0f, 1.0f, rng));
    TS_ASSIGN_OR_RETURN(Tensor k, uniform(dev, {T, Hk, Dk}, -1.0f, 1.0f, rng));
    TS_ASSIGN_OR_RETURN(Tensor v, uniform(dev, {T, Hv, Dv}, -1.0f, 1.0f, rng));
    TS_ASSIGN_OR_RETURN(Tensor alpha, uniform(dev, {T, Hv}, -3.0f, 3.0f, rng));
    TS_ASSIGN_OR_RETURN(Tensor beta, uniform(dev, {T, Hv}, -3.0f, 3.0f, rng));
    TS_ASSIGN_OR_RETURN(Tensor decay, uniform(dev, {Hv}, -2.0f, -0.05f, rng));
    TS_ASSIGN_OR_RETURN(Tensor dtb, uniform(dev, {Hv}, -1.0f, 1.0f, rng));
    TS_ASSIGN_OR_RETURN(Tensor st, uniform(dev, {1, Hv, Dk, Dv}, -0.1f, 0.1f, rng));
    TS_ASSIGN_OR_RETURN(Tensor qs, i32_tensor(dev, {0, int32_t(T)}));
    TS_ASSIGN_OR_RETURN(Tensor slots, i32_tensor(dev, {0}));
    Graph conv;
    conv.mark_output(conv.ssm_conv({conv.input(x), conv.input(w), conv.input(cst), conv.input(qs), conv.input(slots)},
                                   SsmConvParams{true}));
    Graph gdn;
    Graph::GatedDeltaNetInputs in{};
    in.q = gdn.input(q);
    in.k = gdn.input(k);
    in.v = gdn.input(v);
    in.alpha = gdn.input(alpha);
    in.beta = gdn.input(beta);
    in.decay_rate = gdn.input(decay);
    in.dt_bias = gdn.input(dtb);
    in.state = gdn.input(st);
    in.query_start = gdn.input(qs);
    in.state_slots = gdn.input(slots);
    gdn.mark_output(gdn.gated_delta_net(in, GatedDeltaNetParams{}));
    Timing tc, tt, tk;
    // A warm-up call of each, then alternating timed calls.
    TS_RETURN_IF_ERROR(dev.compute(conv));
    set_form("0");
    TS_RETURN_IF_ERROR(dev.compute(gdn));
    set_form("1");
    TS_RETURN_IF_ERROR(dev.compute(gdn));
    TS_RETURN_IF_ERROR(dev.synchronize());
    for (int r = 0; r < a.repeats; ++r) {
      TS_RETURN_IF_ERROR(time_call(dev, conv, threads, tc));
      if (cpu) {
        set_form("0");
        TS_RETURN_IF_ERROR(time_call(dev, gdn, threads, tt));
        set_form("1");
      }
      TS_RETURN_IF_ERROR(time_call(dev, gdn, threads, tk));
    }
    print("ssm_conv", tc, T);
    if (cpu) print("gated_delta_net token form", tt, T);
    print(cpu ? "gated_delta_net chunked" : "gated_delta_net", tk, T);
    if (cpu)
      std::printf("chunked / token-by-token speedup: %.2fx (wall), %.2fx (cpu-time)\n",
                  median_of(tt.wall) / std::max(median_of(tk.wall), 1e-12), median_of(tt.cpu) / std::max(median_of(tk.cpu), 1e-12));
    return OkStatus();
  };
  const Status s = run();
  if (saved.empty()) unsetenv("TESSERA_CPU_GDN_CHUNKED");
  else setenv("TESSERA_CPU_GDN_CHUNKED", saved.c_str(), 1);
  if (!s.ok()) {
    std::fprintf(stderr, "tessera-bench recurrent: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace tessera::bench

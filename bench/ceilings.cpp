#include "bench/ceilings.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if TESSERA_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif
#if TESSERA_BENCH_HAVE_OPENMP
#include <omp.h>
#endif

#include "bench/device_clock.h"
#include "bench/inputs.h"
#include "bench/sweep.h"
#include "bench/timing.h"

namespace tessera::bench {

namespace {

// Sums |n| floats (n a multiple of 128) with independent accumulators, so the loop is bound by
// loads, not by add latency. The sum is returned so the compiler cannot drop the reads.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float read_avx512(const float* p, size_t n) {
  __m512 a[8];
  for (auto& v : a) v = _mm512_setzero_ps();
  for (size_t i = 0; i < n; i += 128)
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(a[j], _mm512_load_ps(p + i + 16 * j));
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_ps(a[0], a[j]);
  // NOTE: _mm512_reduce_add_ps trips GCC 12's -Wuninitialized (_mm256_undefined_pd) under -Werror.
  float out[16];
  _mm512_storeu_ps(out, a[0]);
  float sum = 0.0f;
  for (float v : out) sum += v;
  return sum;
}
__attribute__((target("avx2"))) float read_avx2(const float* p, size_t n) {
  __m256 a[8];
  for (auto& v : a) v = _mm256_setzero_ps();
  for (size_t i = 0; i < n; i += 64)
    for (int j = 0; j < 8; ++j) a[j] = _mm256_add_ps(a[j], _mm256_load_ps(p + i + 8 * j));
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_ps(a[0], a[j]);
  float out[8];
  _mm256_storeu_ps(out, a[0]);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}
__attribute__((target("avx512f"))) void copy_avx512(const float* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; i += 16) _mm512_store_ps(dst + i, _mm512_load_ps(src + i));
}
#endif

float read_floats(const float* p, size_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return read_avx512(p, n);
  if (__builtin_cpu_supports("avx2")) return read_avx2(p, n);
#endif
  float a[8] = {};
  for (size_t i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += p[i + j];
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

void copy_floats(const float* src, float* dst, size_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return copy_avx512(src, dst, n);
#endif
  std::memcpy(dst, src, n * sizeof(float));
}

void pin_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % int(std::max(1u, std::thread::hardware_concurrency())), &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort: a VM may refuse
}

// Runs body(thread, part_begin, part_end) on |threads| pinned threads, |repeats| + 2 warm-up
// times between barriers, and returns the seconds of each timed repeat.
template <class Body, class Setup>
std::vector<double> run_parts(size_t n, int threads, int repeats, Setup setup, Body body) {
  const size_t part = n / size_t(threads) / 128 * 128;
  std::barrier sync(threads);
  std::vector<double> seconds;
  double t0 = 0;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      pin_to_cpu(t);
      setup(t, part * size_t(t), part * size_t(t + 1));
      for (int r = 0; r < repeats + 2; ++r) {
        sync.arrive_and_wait();
        if (t == 0) t0 = now_seconds();
        body(t, part * size_t(t), part * size_t(t + 1));
        sync.arrive_and_wait();
        if (t == 0 && r >= 2) seconds.push_back(now_seconds() - t0);
      }
    });
  for (auto& th : pool) th.join();
  return seconds;
}

}  // namespace

Stat cpu_read_bandwidth(float* buffer, size_t n_floats, int threads, bool first_touch, int repeats) {
  std::vector<float> sums(static_cast<size_t>(threads));
  const size_t part = n_floats / size_t(threads) / 128 * 128;
  auto setup = [&](int, size_t b, size_t e) {
    if (first_touch) std::fill(buffer + b, buffer + e, 1.0f);
  };
  auto body = [&](int t, size_t b, size_t e) { sums[size_t(t)] += read_floats(buffer + b, e - b); };
  Stat s = make_stat(run_parts(n_floats, threads, repeats, setup, body));
  return rate_stat(s, double(part) * double(threads) * sizeof(float) / 1e9);
}

Stat cpu_copy_bandwidth(float* buffer, size_t n_floats, int threads, int repeats) {
  const size_t half = n_floats / 2 / 128 * 128;
  const size_t part = half / size_t(threads) / 128 * 128;
  auto setup = [](int, size_t, size_t) {};
  auto body = [&](int, size_t b, size_t e) { copy_floats(buffer + b, buffer + half + b, e - b); };
  Stat s = make_stat(run_parts(half, threads, repeats, setup, body));
  return rate_stat(s, 2.0 * double(part) * double(threads) * sizeof(float) / 1e9);
}

Result<Stat> onednn_gemm_gflops(const std::string& dtype, int64_t size, int threads, int repeats, double* cpu_gflops) {
#if TESSERA_HAVE_DNNL
  using dnnl::memory;
  using dt = memory::data_type;
  dt a_type = dt::f32, b_type = dt::f32, c_type = dt::f32;
  if (dtype == "bf16") a_type = b_type = dt::bf16;
  else if (dtype == "int8") a_type = dt::u8, b_type = dt::s8, c_type = dt::s32;
  else if (dtype != "f32") return InvalidArgument("onednn: no GEMM for dtype '" + dtype + "'");
#if TESSERA_BENCH_HAVE_OPENMP
  omp_set_num_threads(threads);
#endif
  try {
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream strm(eng);
    const memory::dims a_dims = {size, size}, b_dims = {size, size};
    memory::desc a_md(a_dims, a_type, memory::format_tag::ab);
    memory::desc b_md(b_dims, b_type, memory::format_tag::any);  // let oneDNN pick its packed layout
    memory::desc c_md(a_dims, c_type, memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), eng);
    dnnl::matmul prim(pd);
    memory a(pd.src_desc(), eng), b(pd.weights_desc(), eng), c(pd.dst_desc(), eng);
    // Small non-zero bytes: valid u8/s8, and tiny normal values as bf16/f32 bit patterns.
    for (memory* m : {&a, &b}) std::memset(m->get_data_handle(), 0x3c, m->get_desc().get_size());
    TimingBudget budget;
    budget.budget_s = 1.0;
    budget.min_sample_s = 0.0;
    budget.min_samples = repeats;
    budget.max_samples = repeats;
    double cpu_s = 0;
    int64_t calls = 0;
    auto call = [&](int64_t) {
      const double c0 = process_cpu_seconds();
      prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
      strm.wait();
      cpu_s += process_cpu_seconds() - c0;
      ++calls;
      return OkStatus();
    };
    auto finish = [&] {
      strm.wait();
      return OkStatus();
    };
    TS_ASSIGN_OR_RETURN(Stat s, time_calls(call, finish, budget, nullptr));
    const double gflop = 2.0 * double(size) * double(size) * double(size) / 1e9;
    if (cpu_gflops) *cpu_gflops = cpu_s > 0 ? gflop * double(calls) / (cpu_s / threads) : 0.0;
    return rate_stat(s, gflop);
  } catch (const dnnl::error& e) {
    return Unavailable("onednn " + dtype + " GEMM: " + e.what());
  }
#else
  return Unavailable("onednn: this build has no oneDNN (libdnnl-dev not found)");
#endif
}

std::vector<Ceiling> cpu_ceilings(int threads, const CeilingOptions& o) {
  std::vector<Ceiling> out;
  const size_t n = o.buffer_bytes / sizeof(float) / 256 * 256;
  auto* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
  if (buf) {
    const std::string mb = std::to_string(o.buffer_bytes >> 20) + " MiB";
    out.push_back({"read", "GB/s",
                   std::to_string(threads) + " threads, each first-touches and reads its own part of " + mb +
                       " with the widest loads",
                   cpu_read_bandwidth(buf, n, threads, true, o.repeats)});
    if (threads > 1)
      out.push_back({"read_1t", "GB/s", "1 thread reads all " + mb, cpu_read_bandwidth(buf, n, 1, false, o.repeats)});
    out.push_back({"copy", "GB/s", std::to_string(threads) + " threads copy " + std::to_string(o.buffer_bytes >> 21) +
                                       " MiB (bytes read + written)",
                   cpu_copy_bandwidth(buf, n, threads, o.repeats)});
    std::free(buf);
  }
  const int64_t size = o.quick ? 1024 : 2048;
  for (const char* dtype : {"f32", "bf16", "int8"}) {
    auto s = onednn_gemm_gflops(dtype, size, threads, o.repeats);
    if (!s.ok()) {
      std::fprintf(stderr, "tessera-bench: %s\n", s.status().to_string().c_str());
      continue;
    }
    out.push_back({dtype, "GFLOP/s",
                   "oneDNN " + std::string(dtype == std::string("int8") ? "u8s8s32" : dtype) + " GEMM " +
                       std::to_string(size) + "^3, " + std::to_string(threads) + " threads",
                   *s});
  }
  return out;
}

namespace {
// Times |c| through the HAL with two input sets; the figure is |amount| per second / 1e9. Device
// time (GPU timestamps) where the device has a clock, else host wall time; |how| says which.
Result<Stat> hal_rate(Device& device, const KernelCase& c, double amount, double budget_s, std::string* how) {
  InputPlacer placer(device, nullptr);
  std::vector<Graph> graphs;
  for (int i = 0; i < 2; ++i) {
    TS_ASSIGN_OR_RETURN(Graph g, build_case(c, placer));
    graphs.push_back(std::move(g));
  }
  TimingBudget budget;
  budget.budget_s = budget_s;
  TimeSource source = TimeSource::kHostWall;
  TS_ASSIGN_OR_RETURN(Stat s, time_graphs(device, graphs, budget, nullptr, &source));
  *how = source == TimeSource::kDeviceTimestamps ? " (GPU timestamps)" : "";
  return rate_stat(s, amount / 1e9);
}
}  // namespace

std::vector<Ceiling> hal_ceilings(Device& device, const CeilingOptions& o) {
  std::vector<Ceiling> out;
  // Devices with peak kernels of their own (CUDA/HIP, Vulkan) measure their ceilings with them: a roof
  // made of the HAL's own ops at one shape is no roof (kernels plot above it).
  if (auto peaks = device.measure_peaks(o.quick); peaks.ok()) {
    for (const PeakFigure& p : *peaks)
      if (!p.samples.empty())
        out.push_back({p.name, p.name == "read" || p.name == "copy" ? "GB/s" : "GFLOP/s", p.method, make_stat(p.samples)});
    return out;
  }
  const int64_t n = o.quick ? 2048 : 4096;
  KernelCase gemv;
  gemv.op = OpKind::kMatmul, gemv.m = 1, gemv.n = n, gemv.k = n;
  std::string how;
  auto read = hal_rate(device, gemv, case_cost(gemv).bytes, 1.0, &how);
  if (read.ok())
    out.push_back({"read", "GB/s",
                   "HAL f32 GEMV [1," + std::to_string(n) + "] x [" + std::to_string(n) + "," + std::to_string(n) + "]" + how,
                   *read});
  KernelCase copy;
  copy.op = OpKind::kCopy, copy.m = n, copy.n = n;
  auto copied = hal_rate(device, copy, case_cost(copy).bytes, 1.0, &how);
  if (copied.ok())
    out.push_back({"copy", "GB/s",
                   "HAL copy of [" + std::to_string(n) + "," + std::to_string(n) + "] f32 (read + write)" + how, *copied});
  // Peak FLOP/s per weight dtype: grow a square matmul until one call takes 20 ms (or 2048).
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType w = dtype_table()[i].dtype;
    if (!dtype_table()[i].quantize_row || !device.supports(OpKind::kMatmul, DType::kF32, w)) continue;
    KernelCase mm;
    mm.op = OpKind::kMatmul, mm.weight = w;
    Result<Stat> best = Unavailable("not measured");
    // K holds whole blocks (the K-quants' are 256 elements), else the weight image has no rows.
    for (int64_t s = std::max<int64_t>(128, dtype_table()[i].block_elems); s <= (o.quick ? 512 : 2048); s *= 2) {
      mm.m = mm.n = mm.k = s;
      best = hal_rate(device, mm, case_cost(mm).flops, o.quick ? 0.2 : 0.5, &how);
      if (!best.ok() || 2.0 * double(s) * s * s / (best->median * 1e9) > 0.02) break;
    }
    if (best.ok())
      out.push_back({dtype_name(w), "GFLOP/s",
                     "HAL matmul f32 x " + std::string(dtype_name(w)) + " at M=N=K=" + std::to_string(mm.m) + how, *best});
  }
  return out;
}

void set_roofline(DeviceReport& d) {
  for (const auto& c : d.ceilings) {
    if (c.name == "read") d.bandwidth_gbs = c.value.median;
    else if (c.unit == "GFLOP/s") d.compute_gflops[c.name] = c.value.median;
  }
}

}  // namespace tessera::bench

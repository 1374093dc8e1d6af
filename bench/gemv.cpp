// The gemv subcommand: for every weight format the CPU supports, the decode GEMV (M = 1) at
// N x K = 8192 x 2048 as GB/s and as a share of the read bandwidth measured the same way with
// the same thread count, and the prefill GEMM (M = 512) in GFLOP/s next to oneDNN's f32, bf16
// and int8 GEMM peaks measured in the same run.
//
// The machines are shared, so every figure is given twice: by wall time and by CPU time (process
// CPU seconds / threads: the time the work would take unloaded, since the pool's idle workers
// block rather than spin). Both are medians of repeats; the % of read bandwidth compares like
// with like (CPU time with CPU time).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/thread_pool.h"
#include "bench/ceilings.h"
#include "bench/commands.h"
#include "bench/read_loop.h"
#include "bench/sweep.h"
#include "bench/timing.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera::bench {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of |fn| by wall time and by CPU time / threads (medians of |reps| after two
// warm-up calls).
struct Timing {
  double wall = 0, cpu = 0;
};
template <class Fn>
Timing time_repeats(int threads, int reps, Fn fn) {
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps + 2; ++r) {
    const double c0 = process_cpu_seconds(), t0 = now_seconds();
    if (!fn()) return {};
    const double w = now_seconds() - t0, c = (process_cpu_seconds() - c0) / threads;
    if (r >= 2) wall.push_back(w), cpu.push_back(c);
  }
  return {median(wall), median(cpu)};
}

float read_plain(const float* p, int64_t n) {
  float s[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  return s[0] + s[7];
}

// Read bandwidth of the CPU backend's own thread pool: each thread first touches and then reads
// its contiguous part of |bytes| (like the GEMV, whose threads each stream their own weight rows).
Timing read_bandwidth_seconds(int threads, int64_t bytes, int reps) {
  cpu::ThreadPool pool(threads);
  const int64_t n = bytes / 4 / (64 * threads) * (64 * threads);
  auto* buf = static_cast<float*>(std::aligned_alloc(64, size_t(n) * 4));
  if (!buf) return {};
  pool.run_on_all([&](int t) { std::fill(buf + n * t / threads, buf + n * (t + 1) / threads, 1.0f); });
  bool avx2 = false;
#if defined(__x86_64__)
  avx2 = __builtin_cpu_supports("avx2");
#endif
  std::vector<float> sink(static_cast<size_t>(threads), 0.0f);
  const Timing t = time_repeats(threads, reps, [&] {
    pool.run_on_all([&](int i) {
      const float* p = buf + n * i / threads;
#if defined(__x86_64__)
      if (avx2) { sink[size_t(i)] += read_avx2(p, n / threads); return; }
#endif
      sink[size_t(i)] += read_plain(p, n / threads);
    });
    return true;
  });
  std::free(buf);
  return t;
}

// A weight [N, K] of |w| quantised from uniform [-1, 1) values (fixed seed).
std::vector<uint8_t> weight_image(DType w, int64_t N, int64_t K) {
  const auto& tr = dtype_traits(w);
  const int64_t rb = dtype_row_bytes(w, K);
  std::vector<uint8_t> img(static_cast<size_t>(N * rb));
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t r = 0; r < N; ++r) {
    for (float& v : row) v = u(rng);
    tr.quantize_row(row.data(), img.data() + r * rb, K);
  }
  return img;
}

struct Row {
  int threads;
  std::string dtype, what;
  double wall_value, cpu_value, pct_wall, pct_cpu;  // GB/s (gemv) or GFLOP/s (gemm)
};

// Times matmul x[M, K] @ w^T on |device| over |copies| distinct weights in one graph (so a GEMV
// streams a working set several times the last-level cache). Returns seconds per matmul.
Result<Timing> time_matmul(cpu::CpuDevice& device, DType w, int64_t M, int64_t N, int64_t K, int copies, int reps) {
  const std::vector<uint8_t> img = weight_image(w, N, K);
  std::vector<Tensor> ws;
  for (int i = 0; i < copies; ++i) {
    TS_ASSIGN_OR_RETURN(Tensor t, upload_new(device, Tensor::make(w, {N, K}), img.data()));
    ws.push_back(t);
  }
  std::vector<float> xs(static_cast<size_t>(M * K));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : xs) v = u(rng);
  TS_ASSIGN_OR_RETURN(Tensor x, upload_new(device, Tensor::make(DType::kF32, {M, K}), xs.data()));
  Status status;
  const Timing t = time_repeats(device.info().threads, reps, [&] {
    Graph g;
    const ValueId xv = g.input(x);
    for (const Tensor& wt : ws) g.mark_output(g.matmul(xv, g.input(wt)));
    status = device.compute(g);
    return status.ok();
  });
  TS_RETURN_IF_ERROR(status);
  return Timing{t.wall / copies, t.cpu / copies};
}

}  // namespace

int run_gemv(const GemvArgs& a) {
  const int64_t N = a.quick ? 2048 : 8192, K = 2048, M_prefill = a.quick ? 64 : 512, N_prefill = 2048;
  const int reps = a.quick ? 5 : 11;
  const double working_set = 4.0 * double(last_level_cache_bytes());
  std::vector<Row> rows;
  for (int t : a.threads) {
    if (t < 1) continue;
    const Timing bw = read_bandwidth_seconds(t, a.quick ? int64_t(256) << 20 : int64_t(1) << 30, reps);
    const double bytes = double(a.quick ? int64_t(256) << 20 : int64_t(1) << 30) / 1e9;
    const double read_wall = bw.wall > 0 ? bytes / bw.wall : 0, read_cpu = bw.cpu > 0 ? bytes / bw.cpu : 0;
    std::printf("read bandwidth, %d thread%s (thread pool, first touch by the reader): wall %.1f GB/s, cpu-time %.1f GB/s\n",
                t, t > 1 ? "s" : "", read_wall, read_cpu);
    rows.push_back({t, "-", "read", read_wall, read_cpu, 100, 100});
    for (const char* dt : {"f32", "bf16", "int8"}) {
      if (a.no_gemm) break;
      double cpu_gflops = 0;
      auto peak = onednn_gemm_gflops(dt, a.quick ? 1024 : 2048, t, a.quick ? 3 : 5, &cpu_gflops);
      if (peak.ok()) {
        std::printf("oneDNN %-4s GEMM peak, %d thread%s: wall %.1f GFLOP/s, cpu-time %.1f GFLOP/s\n", dt, t,
                    t > 1 ? "s" : "", peak->median, cpu_gflops);
        rows.push_back({t, dt, "onednn_peak", peak->median, cpu_gflops, 0, 0});
      } else {
        std::printf("oneDNN %-4s GEMM peak: %s\n", dt, peak.status().to_string().c_str());
      }
    }
    cpu::CpuDevice device(t);
    std::printf("%-7s %-10s %18s %18s %22s\n", "threads", "dtype", "GEMV GB/s wall/cpu", "% read wall/cpu",
                ("GEMM M=" + std::to_string(M_prefill) + " GFLOP/s w/c").c_str());
    for (int i = 0; i < kNumDTypes; ++i) {
      const DType w = dtype_table()[i].dtype;
      if (!dtype_table()[i].quantize_row || !device.supports(OpKind::kMatmul, DType::kF32, w)) continue;
      if (!a.dtypes.empty() && std::find(a.dtypes.begin(), a.dtypes.end(), dtype_name(w)) == a.dtypes.end()) continue;
      const double wbytes = double(dtype_row_bytes(w, K) * N);
      const int copies = int(std::clamp(working_set / wbytes + 1.0, 2.0, 64.0));
      auto gemv = time_matmul(device, w, 1, N, K, copies, reps);
      Result<Timing> gemm = Timing{1.0, 1.0};
      if (!a.no_gemm) gemm = time_matmul(device, w, M_prefill, N_prefill, K, 1, a.quick ? 2 : 3);
      if (!gemv.ok() || !gemm.ok()) {
        std::printf("%-7d %-10s failed: %s\n", t, dtype_name(w),
                    (!gemv.ok() ? gemv.status() : gemm.status()).to_string().c_str());
        continue;
      }
      const double gbs_w = wbytes / gemv->wall / 1e9, gbs_c = wbytes / gemv->cpu / 1e9;
      const double flops = 2.0 * double(M_prefill) * double(N_prefill) * double(K);
      const Row r{t, dtype_name(w), "gemv", gbs_w, gbs_c, 100 * gbs_w / read_wall, 100 * gbs_c / read_cpu};
      std::printf("%-7d %-10s %8.1f / %7.1f %8.1f%% / %6.1f%%", t, r.dtype.c_str(), gbs_w, gbs_c, r.pct_wall, r.pct_cpu);
      if (a.no_gemm)
        std::printf("\n");
      else
        std::printf(" %10.1f / %9.1f\n", flops / gemm->wall / 1e9, flops / gemm->cpu / 1e9);
      rows.push_back(r);
      if (!a.no_gemm) rows.push_back({t, dtype_name(w), "gemm", flops / gemm->wall / 1e9, flops / gemm->cpu / 1e9, 0, 0});
      std::fflush(stdout);
    }
  }
  if (!a.csv.empty()) {
    std::ofstream f(a.csv);
    f << "threads,dtype,what,wall,cpu,pct_read_wall,pct_read_cpu\n";
    for (const Row& r : rows)
      f << r.threads << ',' << r.dtype << ',' << r.what << ',' << r.wall_value << ',' << r.cpu_value << ','
        << r.pct_wall << ',' << r.pct_cpu << '\n';
    if (!f) {
      std::fprintf(stderr, "tessera-bench: %s: cannot write\n", a.csv.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace tessera::bench

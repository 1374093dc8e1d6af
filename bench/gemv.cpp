// The gemv subcommand: for every weight format the CPU supports, the decode GEMV (M = 1) at
// N x K = 8192 x 2048 as GB/s and as a share of the read bandwidth measured the same way with
// the same thread count, and the prefill GEMM (M = 512) in GFLOP/s next to oneDNN's f32, bf16
// and int8 GEMM peaks measured in the same run.
//
// Next to it, the same kernel with each thread's weights resident in its L2 (the arithmetic
// ceiling, no DRAM): when that is not well above the read bandwidth, the format is bound by
// instructions on this CPU, and no memory-side change can bring it to the read bandwidth.
//
// The machines are shared and their bandwidth drifts by +-15% within seconds (other tenants,
// clock changes), so the share of read bandwidth is PAIRED: every GEMV pass (all weight copies
// once) is timed next to a read pass over as many bytes of a separate buffer, in alternating
// order, on the same thread pool, and the figure is the median of the per-pair ratios. Every
// figure is given by wall time and by CPU time (process CPU seconds / threads); the pool spins
// briefly between jobs, so on a quiet machine the two agree.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/ceilings.h"
#include "bench/commands.h"
#include "bench/cpu_isa.h"
#include "bench/read_loop.h"
#include "bench/sweep.h"
#include "bench/timing.h"
#include "core/profiling.h"
#include "core/registry.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera::bench {
namespace {

struct Timing {
  double wall = 0, cpu = 0;  // seconds
};
// Wall and CPU time / threads of one call of |fn|; {} when fn fails.
template <class Fn>
Timing time_once(int threads, Fn fn) {
  const double c0 = process_cpu_seconds(), t0 = now_seconds();
  if (!fn()) return {};
  return {now_seconds() - t0, (process_cpu_seconds() - c0) / threads};
}

float read_plain(const float* p, int64_t n) {
  float s[8] = {};
  for (int64_t i = 0; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += p[i + j];
  return s[0] + s[7];
}

// A read-bandwidth pass on the CPU device's own worker threads (DeviceProfiling::run_on_workers):
// each thread reads its contiguous
// part of a window of the buffer (like the GEMV, whose threads each stream their own weight
// rows). The buffer is first touched by the thread that later reads each part, and successive
// windows rotate through it, so no window is still in the last-level cache.
class ReadPass {
 public:
  ReadPass(DeviceProfiling& pool, int64_t bytes)
      : pool_(pool), n_(bytes / 4 / (64 * pool.workers()) * (64 * pool.workers())) {
    buf_ = static_cast<float*>(std::aligned_alloc(64, size_t(n_) * 4));
    if (!buf_) return;
    const int t = pool.workers();
    pool.run_on_workers([&](int i) { std::fill(buf_ + n_ * i / t, buf_ + n_ * (i + 1) / t, 1.0f); });
#if defined(__x86_64__)
    avx2_ = __builtin_cpu_supports("avx2");
#endif
    sink_.assign(size_t(t), 0.0f);
  }
  ~ReadPass() { std::free(buf_); }
  bool ok() const { return buf_ != nullptr; }
  // Reads |bytes| (in several windows when that is more than the buffer) and returns the time
  // it took.
  Timing run(int64_t bytes) {
    const int t = pool_.workers();
    const int64_t unit = 64 * t;
    return time_once(t, [&] {
      for (int64_t left = std::max<int64_t>(unit, bytes / 4 / unit * unit); left > 0;) {
        const int64_t w = std::min(n_, left);
        left -= w;
        if (next_ + w > n_) next_ = 0;
        const float* base = buf_ + next_;
        next_ += w;
        pool_.run_on_workers([&](int i) {
          const float* p = base + w * i / t;
#if defined(__x86_64__)
          if (avx2_) {
            sink_[size_t(i)] += read_avx2(p, w / t);
            return;
          }
#endif
          sink_[size_t(i)] += read_plain(p, w / t);
        });
      }
      return true;
    });
  }

 private:
  DeviceProfiling& pool_;
  int64_t n_;
  float* buf_ = nullptr;
  int64_t next_ = 0;
  bool avx2_ = false;
  std::vector<float> sink_;
};

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

struct Measured {
  Timing call;                            // median seconds per matmul
  double ratio_wall = 0, ratio_cpu = 0;   // median over pairs of GEMV GB/s / read GB/s
  double read_wall = 0, read_cpu = 0;     // median GB/s of the paired read passes
};

// Times matmul x[M, K] @ w^T on |device| over |copies| distinct weights in one graph (so a GEMV
// streams a working set several times the last-level cache), |reps| times after 2 warm-ups. With
// |read|, each pass is paired with a read pass over the same number of bytes, the two run in
// alternating order.
// With |prepared|, the weights pass through Device::prepare_weight as a model load does.
Result<Measured> time_matmul(Device& device, DType w, int64_t M, int64_t N, int64_t K, int copies, int reps,
                             ReadPass* read, bool prepared) {
  const std::vector<uint8_t> img = weight_image(w, N, K);
  std::vector<Tensor> ws;
  for (int i = 0; i < copies; ++i) {
    TS_ASSIGN_OR_RETURN(Tensor t, upload_new(device, Tensor::make(w, {N, K}), img.data()));
    if (prepared) {
      TS_ASSIGN_OR_RETURN(t, device.prepare_weight(t, OpKind::kMatmul));
    }
    ws.push_back(t);
  }
  std::vector<float> xs(static_cast<size_t>(M * K));
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& v : xs) v = u(rng);
  TS_ASSIGN_OR_RETURN(Tensor x, upload_new(device, Tensor::make(DType::kF32, {M, K}), xs.data()));
  const int threads = device.info().threads;
  const int64_t pass_bytes = int64_t(copies) * dtype_row_bytes(w, K) * N;
  Status status;
  const auto pass = [&] {
    return time_once(threads, [&] {
      Graph g;
      const ValueId xv = g.input(x);
      for (const Tensor& wt : ws) g.mark_output(g.matmul(xv, g.input(wt)));
      status = device.compute(g);
      return status.ok();
    });
  };
  std::vector<double> wall, cpu, rw, rc, bw, bc;
  for (int r = 0; r < reps + 2; ++r) {
    Timing rd, t;
    if (read && r % 2 == 0) rd = read->run(pass_bytes);
    t = pass();
    TS_RETURN_IF_ERROR(status);
    if (read && r % 2 == 1) rd = read->run(pass_bytes);
    if (r < 2) continue;
    wall.push_back(t.wall / copies), cpu.push_back(t.cpu / copies);
    if (read && rd.wall > 0 && rd.cpu > 0) {
      rw.push_back(rd.wall / t.wall), rc.push_back(rd.cpu / t.cpu);
      bw.push_back(double(pass_bytes) / rd.wall / 1e9), bc.push_back(double(pass_bytes) / rd.cpu / 1e9);
    }
  }
  return Measured{{median_of(wall), median_of(cpu)}, median_of(rw), median_of(rc), median_of(bw), median_of(bc)};
}

// The decode kernel's rate with the weights in cache (DeviceProfiling::in_cache_gemv_gbs): every
// thread runs the GEMV over its own ~128 KiB weight (in its L2) over and over, with no graph or
// dispatch in between. 0 when the device cannot say.
double in_cache_gbs(DeviceProfiling& profiling, DType w, int64_t K, double seconds, bool prepared) {
  const int64_t rows = std::max<int64_t>(8, (int64_t(128) << 10) / dtype_row_bytes(w, K));
  const std::vector<uint8_t> img = weight_image(w, rows, K);
  auto gbs = profiling.in_cache_gemv_gbs(w, img.data(), rows, K, seconds, prepared);
  if (!gbs.ok()) std::fprintf(stderr, "tessera-bench: in-cache GEMV: %s\n", gbs.status().to_string().c_str());
  return gbs.ok() ? *gbs : 0.0;
}

}  // namespace

namespace {
// oneDNN's GEMM peak per activation dtype at |t| threads (the roof the GEMM figures are read against).
void onednn_peaks(int t, bool quick, std::vector<Row>* rows) {
  for (const char* dt : {"f32", "bf16", "int8"}) {
    double cpu_gflops = 0;
    auto peak = onednn_gemm_gflops(dt, quick ? 1024 : 2048, t, quick ? 3 : 5, &cpu_gflops);
    if (peak.ok()) {
      std::printf("oneDNN %-4s GEMM peak, %d thread%s: wall %.1f GFLOP/s, cpu-time %.1f GFLOP/s\n", dt, t,
                  t > 1 ? "s" : "", peak->median, cpu_gflops);
      rows->push_back({t, dt, "onednn_peak", peak->median, cpu_gflops, 0, 0});
    } else {
      std::printf("oneDNN %-4s GEMM peak: %s\n", dt, peak.status().to_string().c_str());
    }
  }
}

// The GEMM of weight format |w| at --gemm-m's row counts, prepared and row-layout weights
// alternately (3 rounds, medians).
void gemm_at_m(Device& device, DType w, int64_t N_prefill, int64_t K, const GemvArgs& a, int t,
               std::vector<Row>* rows) {
  for (int64_t m : a.gemm_m) {
    std::vector<double> gf[2];
    for (int round = 0; round < 3; ++round)
      for (int layout = 0; layout < 2; ++layout) {
        const bool prep = (layout + round) % 2 == 0;
        auto g = time_matmul(device, w, m, N_prefill, K, 1, a.quick ? 2 : 3, nullptr, prep);
        if (g.ok()) gf[prep ? 0 : 1].push_back(2.0 * double(m) * double(N_prefill) * double(K) / g->call.wall / 1e9);
      }
    std::printf("        %-10s GEMM M=%-4lld N=%lld K=%lld GFLOP/s: prepared %.1f, rows %.1f (x%.2f)\n", dtype_name(w),
                static_cast<long long>(m), static_cast<long long>(N_prefill), static_cast<long long>(K),
                median_of(gf[0]), median_of(gf[1]), median_of(gf[1]) > 0 ? median_of(gf[0]) / median_of(gf[1]) : 0.0);
    rows->push_back(
        {t, dtype_name(w), "gemm_m" + std::to_string(m) + "_prepared", median_of(gf[0]), median_of(gf[0]), 0, 0});
    rows->push_back(
        {t, dtype_name(w), "gemm_m" + std::to_string(m) + "_rows", median_of(gf[1]), median_of(gf[1]), 0, 0});
  }
}

bool write_csv(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream f(path);
  f << "threads,dtype,what,wall,cpu,pct_read_wall,pct_read_cpu\n";
  for (const Row& r : rows)
    f << r.threads << ',' << r.dtype << ',' << r.what << ',' << r.wall_value << ',' << r.cpu_value << ',' << r.pct_wall
      << ',' << r.pct_cpu << '\n';
  if (!f) {
    std::fprintf(stderr, "tessera-bench: %s: cannot write\n", path.c_str());
    return false;
  }
  return true;
}
}  // namespace

int run_gemv(const GemvArgs& a) {
  if (!force_cpu_isa(a.isa)) return 1;
  const int64_t N = a.quick ? 2048 : 8192, K = 2048, M_prefill = a.quick ? 64 : 512, N_prefill = 2048;
  const int reps = a.quick ? 5 : 15;
  const double working_set = 4.0 * double(last_level_cache_bytes());
  std::vector<Row> rows;
  for (int t : a.threads) {
    if (t < 1) continue;
    const DevicePtr dev = make_cpu_device(t);
    Device& device = *dev;
    DeviceProfiling* profiling = device.profiling();
    if (!profiling) {
      std::fprintf(stderr, "tessera-bench: the CPU device offers no profiling hooks\n");
      return 1;
    }
    ReadPass read(*profiling, a.quick ? int64_t(256) << 20 : int64_t(1) << 30);
    if (!read.ok()) {
      std::fprintf(stderr, "tessera-bench: cannot allocate the read-bandwidth buffer\n");
      return 1;
    }
    if (!a.no_gemm) onednn_peaks(t, a.quick, &rows);
    std::printf("%d thread%s; %% read = median over %d pairs of (GEMV pass / read pass over the same bytes)\n", t,
                t > 1 ? "s" : "", reps);
    std::printf("%-7s %-10s %18s %18s %18s %17s %22s\n", "threads", "dtype", "read GB/s wall/cpu", "GEMV GB/s wall/cpu",
                "% read wall/cpu", "in-cache GB/s, %", ("GEMM M=" + std::to_string(M_prefill) + " GFLOP/s w/c").c_str());
    std::vector<double> read_w, read_c;
    for (int i = 0; i < kNumDTypes; ++i) {
      const DType w = dtype_table()[i].dtype;
      if (!dtype_table()[i].quantize_row || !device.supports(OpKind::kMatmul, DType::kF32, w)) continue;
      if (!a.dtypes.empty() && std::find(a.dtypes.begin(), a.dtypes.end(), dtype_name(w)) == a.dtypes.end()) continue;
      const double wbytes = double(dtype_row_bytes(w, K) * N);
      const int copies = int(std::clamp(working_set / wbytes + 1.0, 2.0, 64.0));
      auto gemv = time_matmul(device, w, 1, N, K, copies, reps, &read, !a.rows);
      Result<Measured> gemm = Measured{};
      if (!a.no_gemm) gemm = time_matmul(device, w, M_prefill, N_prefill, K, 1, a.quick ? 2 : 3, nullptr, !a.rows);
      if (!gemv.ok() || !gemm.ok()) {
        std::printf("%-7d %-10s failed: %s\n", t, dtype_name(w),
                    (!gemv.ok() ? gemv.status() : gemm.status()).to_string().c_str());
        continue;
      }
      const double gbs_w = wbytes / gemv->call.wall / 1e9, gbs_c = wbytes / gemv->call.cpu / 1e9;
      const double flops = 2.0 * double(M_prefill) * double(N_prefill) * double(K);
      const Row r{t, dtype_name(w), "gemv", gbs_w, gbs_c, 100 * gemv->ratio_wall, 100 * gemv->ratio_cpu};
      read_w.push_back(gemv->read_wall), read_c.push_back(gemv->read_cpu);
      const double cached = in_cache_gbs(*profiling, w, K, a.quick ? 0.02 : 0.1, !a.rows);
      std::printf("%-7d %-10s %8.1f / %7.1f %8.1f / %7.1f %8.1f%% / %6.1f%% %8.1f, %5.0f%%", t, r.dtype.c_str(),
                  gemv->read_wall, gemv->read_cpu, gbs_w, gbs_c, r.pct_wall, r.pct_cpu, cached,
                  gemv->read_wall > 0 ? 100 * cached / gemv->read_wall : 0.0);
      if (a.no_gemm)
        std::printf("\n");
      else
        std::printf(" %10.1f / %9.1f\n", flops / gemm->call.wall / 1e9, flops / gemm->call.cpu / 1e9);
      rows.push_back(r);
      rows.push_back({t, dtype_name(w), "gemv_in_cache", cached, cached, gemv->read_wall > 0 ? 100 * cached / gemv->read_wall : 0,
                      gemv->read_cpu > 0 ? 100 * cached / gemv->read_cpu : 0});
      if (!a.no_gemm)
        rows.push_back({t, dtype_name(w), "gemm", flops / gemm->call.wall / 1e9, flops / gemm->call.cpu / 1e9, 0, 0});
      gemm_at_m(device, w, N_prefill, K, a, t, &rows);
      std::fflush(stdout);
    }
    rows.push_back({t, "-", "read", median_of(read_w), median_of(read_c), 100, 100});
    std::printf(
        "read bandwidth, %d thread%s (median over the formats' paired passes): wall %.1f GB/s, cpu-time %.1f GB/s\n", t,
        t > 1 ? "s" : "", median_of(read_w), median_of(read_c));
  }
  if (!a.csv.empty() && !write_csv(a.csv, rows)) return 1;
  return 0;
}

}  // namespace tessera::bench

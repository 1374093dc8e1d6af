// A hand-run probe (not built by CMake, not a test) of the CPU backend's decode GEMV against
// the machine's read bandwidth. Build and run from the repository root after building
// tessera_backends:
//   g++ -O2 -std=c++20 -I. bench/cpu_gemv_probe.cpp build/lib/libtessera_backends.a
//       build/lib/libtessera_core.a build/lib/libtessera_quant.a -lhwy -ldnnl -lpthread -o /tmp/gemv_probe
//   /tmp/gemv_probe [N=8192] [K=2048] [reps=20]
// Weights rotate through enough distinct matrices that the working set is several times the
// last-level cache; the read-bandwidth baseline reads the same number of bytes the same way
// (each thread its own contiguous half, 256-bit loads, memory first touched by its reader).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "core/reference/reference.h"

#include "bench/read_loop.h"

using namespace tessera;
using tessera::bench::read_avx2;
using Clock = std::chrono::steady_clock;

namespace {
// CPU seconds of the whole process (all threads). On a shared, oversubscribed machine wall time
// mostly measures the other tenants; CPU time / threads estimates the unloaded wall time (the
// pool's workers block, they do not spin, so idle threads add nothing).
double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GB/s of |threads| threads reading |n_bufs| buffers of |bytes| each, every thread its own half.
struct Rate { double wall_gbs, cpu_gbs; };

Rate read_bandwidth(int threads, int n_bufs, int64_t bytes, int reps) {
  cpu::ThreadPool pool(threads);
  const int64_t floats = bytes / 4 / 64 * 64;
  std::vector<float*> bufs(static_cast<size_t>(n_bufs));
  for (auto& b : bufs) b = static_cast<float*>(std::aligned_alloc(64, size_t(floats) * 4));
  pool.run_on_all([&](int t) {  // first touch by the reading thread
    for (float* b : bufs)
      for (int64_t i = floats * t / threads; i < floats * (t + 1) / threads; ++i) b[i] = float(i & 7);
  });
  std::vector<double> gbs, cgbs;
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    pool.run_on_all([&](int t) {
      float s = 0;
      const int64_t a = floats * t / threads / 32 * 32, e = floats * (t + 1) / threads / 32 * 32;
      for (float* b : bufs) s += read_avx2(b + a, e - a);
      sink = sink + s;
    });
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    const double csec = (process_cpu_seconds() - c0) / threads;
    gbs.push_back(double(floats) * 4 * n_bufs / sec / 1e9);
    cgbs.push_back(double(floats) * 4 * n_bufs / csec / 1e9);
  }
  for (auto* b : bufs) std::free(b);
  return {median(gbs), median(cgbs)};
}

// GB/s (weight bytes / time) and microseconds per GEMV for x[M, K] @ W[N, K]^T.
void gemv(DType wt, int threads, int64_t M, int64_t N, int64_t K, int reps, Rate bw) {
  auto dev = std::make_shared<cpu::CpuDevice>(threads);
  const int64_t wbytes = dtype_row_bytes(wt, K) * N;
  const int n_mats = int(std::clamp<int64_t>((int64_t(256) << 20) / wbytes + 1, 4, 16));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> rowf(static_cast<size_t>(K));
  std::vector<uint8_t> wdata(static_cast<size_t>(wbytes));
  for (int64_t r = 0; r < N; ++r) {
    for (auto& v : rowf) v = u(rng);
    const Tensor one = Tensor::make(wt, {1, K});
    std::vector<double> d(rowf.begin(), rowf.end());
    auto buf = dev->alloc(size_t(one.nbytes()));
    Tensor t = one;
    t.buffer = *buf;
    ref::store_row(t, 0, d.data());
    std::copy_n(static_cast<uint8_t*>(t.host_data()), one.nbytes(), wdata.data() + r * one.nbytes());
  }
  std::vector<Tensor> ws;
  for (int i = 0; i < n_mats; ++i) ws.push_back(*upload_new(*dev, Tensor::make(wt, {N, K}), wdata.data()));
  std::vector<float> xs(size_t(M * K));
  for (auto& v : xs) v = u(rng);
  const Tensor x = *upload_new(*dev, Tensor::make(DType::kF32, {M, K}), xs.data());
  std::vector<double> times, ctimes;
  for (int r = 0; r < reps + 2; ++r) {
    Graph g;
    const ValueId xv = g.input(x);
    for (const Tensor& w : ws) g.mark_output(g.matmul(xv, g.input(w)));
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    const Status s = dev->compute(g);
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    const double csec = (process_cpu_seconds() - c0) / threads;
    if (!s.ok()) { std::printf("error: %s\n", s.to_string().c_str()); return; }
    if (r >= 2) { times.push_back(sec); ctimes.push_back(csec); }
  }
  const double sec = median(times), csec = median(ctimes);
  const double gbs = double(wbytes) * n_mats / sec / 1e9, cgbs = double(wbytes) * n_mats / csec / 1e9;
  std::printf("%-5s M=%-3lld N=%lld K=%lld threads=%d mats=%d (%.0f MiB): wall %7.1f us/matmul %6.1f GB/s %5.1f%% | "
              "cpu-time %6.1f GB/s %5.1f%% of read bw\n",
              dtype_name(wt), (long long)M, (long long)N, (long long)K, threads, n_mats,
              double(wbytes) * n_mats / 1048576.0, sec / n_mats * 1e6, gbs, 100.0 * gbs / bw.wall_gbs, cgbs,
              100.0 * cgbs / bw.cpu_gbs);
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t N = argc > 1 ? std::atoll(argv[1]) : 8192, K = argc > 2 ? std::atoll(argv[2]) : 2048;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  const int64_t q4_bytes = dtype_row_bytes(DType::kQ4_0, K) * N;
  Rate bw[3] = {};
  for (int th : {1, 2}) {
    bw[th] = read_bandwidth(th, 16, q4_bytes, reps);
    std::printf("read bandwidth (AVX2 loop, %d thread%s, 16 x %.1f MiB): wall %.1f GB/s | cpu-time %.1f GB/s\n", th,
                th > 1 ? "s" : "", double(q4_bytes) / 1048576.0, bw[th].wall_gbs, bw[th].cpu_gbs);
  }
  for (DType wt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kF16, DType::kF32})
    for (int th : {1, 2}) gemv(wt, th, 1, N, K, reps, bw[th]);
  // Prefill-shaped: own tiles vs oneDNN are compared by running with TESSERA_NO_ONEDNN=1.
  for (int th : {2}) {
    gemv(DType::kF32, th, 64, N / 4, K, 5, bw[th]);
    gemv(DType::kQ4_0, th, 64, N / 4, K, 5, bw[th]);
  }
  return 0;
}

// A hand-run probe (not built by CMake, not a test) that separates the two bounds of the CPU
// decode GEMV: the kernel's arithmetic rate with the weights in cache, and its rate streaming
// from DRAM, both on ONE thread by thread CPU time (so other tenants' load mostly drops out),
// next to a 256-bit read loop on the same thread. It calls gemm_q8_tile directly (M = 1,
// K = 2048), so it can be linked against an older libtessera_backends.a to compare kernels:
//   g++ -O2 -std=c++20 -I. bench/cpu_gemv_kernel_probe.cpp build/lib/libtessera_backends.a
//       build/lib/libtessera_core.a build/lib/libtessera_quant.a -lhwy -ldnnl -lpthread -o /tmp/kprobe
//   /tmp/kprobe q4_0 q8_0 q4_k ...        (KB=64 by default: the in-cache weight size)
// If "in-cache" is not well above "read", the kernel is bound by instructions, not memory.
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "quant/dtype.h"

#include "bench/read_loop.h"

using namespace tessera;
using tessera::bench::read_avx2;

namespace {
double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t K = 2048, nb = K / 32, n_dram = 8192, mats = 8;  // 8 rotating matrices: >= 2x a 32 MB LLC
  const int64_t cache_kb = std::getenv("KB") ? std::atoll(std::getenv("KB")) : 64;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> xf(static_cast<size_t>(K));
  for (float& v : xf) v = u(rng);
  std::vector<cpu::ActQ8> act(static_cast<size_t>(nb));
  cpu::quantize_act_q8(xf.data(), act.data(), K);
  const int64_t rn = (int64_t(256) << 20) / 4;
  auto* rbuf = static_cast<float*>(std::aligned_alloc(64, size_t(rn) * 4));
  std::fill(rbuf, rbuf + rn, 1.0f);
  volatile float sink = 0;
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    const double c0 = thread_cpu_seconds();
    sink = sink + read_avx2(rbuf, rn);
    best = std::min(best, thread_cpu_seconds() - c0);
  }
  std::printf("read, 1 thread: %.1f GB/s (thread CPU time, best of 5)\n", double(rn) * 4 / best / 1e9);
  for (int i = 1; i < argc; ++i) {
    const DTypeTraits* tr = nullptr;
    for (int t = 0; t < kNumDTypes; ++t)
      if (std::string(dtype_table()[t].name) == argv[i]) tr = &dtype_table()[t];
    if (!tr || !tr->quantize_row || !cpu::uses_act_q8(tr->dtype)) {
      std::printf("%s: not an int8-dot format\n", argv[i]);
      continue;
    }
    const int64_t rb = dtype_row_bytes(tr->dtype, K), n_cache = std::max<int64_t>(8, (cache_kb << 10) / rb);
    std::vector<uint8_t> img(static_cast<size_t>(n_dram * rb * mats));
    std::vector<float> row(static_cast<size_t>(K)), out(static_cast<size_t>(n_dram));
    for (int64_t r = 0; r < n_dram * mats; ++r) {
      for (float& v : row) v = u(rng);
      tr->quantize_row(row.data(), img.data() + r * rb, K);
    }
    auto gbs = [&](int64_t N, int calls, int reps) {
      double t = 1e9;
      for (int r = 0; r < reps; ++r) {
        const double c0 = thread_cpu_seconds();
        for (int m = 0; m < calls; ++m)
          cpu::gemm_q8_tile(tr->dtype, act.data(), nb, 0, 1, reinterpret_cast<const char*>(img.data()) + (m % mats) * N * rb,
                            rb, 0, N, nb, out.data(), N);
        t = std::min(t, thread_cpu_seconds() - c0);
      }
      return double(N * rb) * calls / t / 1e9;
    };
    const double in_cache = gbs(n_cache, 400, 7), dram = gbs(n_dram, int(mats), 5);
    std::printf("%-9s in-cache %6.1f GB/s   from DRAM %6.1f GB/s   (out[1] = %g)\n", argv[i], in_cache, dram, out[1]);
  }
  std::free(rbuf);
  return 0;
}

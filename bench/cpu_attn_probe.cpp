// A hand-run probe (not built by CMake, not a test) of the CPU paged attention kernel at long
// context: one sequence whose last |new| tokens (a prefill chunk) attend over |ctx| keys, with
// SmolLM2-135M's heads (9 query, 3 KV, head dim 64). Build from the repository root after
// building tessera_backends:
//   g++ -O2 -std=c++20 -I. bench/cpu_attn_probe.cpp build/lib/libtessera_backends.a
//       build/lib/libtessera_core.a build/lib/libtessera_quant.a -lhwy -ldnnl -lpthread -o /tmp/attn_probe
//   /tmp/attn_probe [ctx=4000] [new=24] [threads=2] [reps=10]
// Prints wall and CPU time per call (CPU time / threads estimates an unloaded wall time on a
// shared machine) and the GFLOP/s of the 4 * Hq * D flops per (query, key) pair.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "bench/timing.h"
#include "core/reference/reference.h"

using namespace tessera;
using tessera::bench::process_cpu_seconds;
using Clock = std::chrono::steady_clock;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A device tensor of |shape| with values uniform in [-1, 1], stored row by row in |dt|.
Tensor random_tensor(Device& dev, DType dt, std::vector<int64_t> shape, std::mt19937& rng) {
  Tensor t = Tensor::make(dt, int(shape.size()), shape.data());
  t.buffer = *dev.alloc(size_t(t.nbytes()));
  const int64_t D = shape.back(), rows = t.numel() / D;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> row(static_cast<size_t>(D));
  const Tensor flat = [&] {
    Tensor f = Tensor::make(dt, {rows, D});
    f.buffer = t.buffer;
    return f;
  }();
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = u(rng);
    ref::store_row(flat, r, row.data());
  }
  return t;
}

Tensor i32_tensor(Device& dev, std::vector<int64_t> shape, const std::vector<int32_t>& v) {
  return *upload_new(dev, Tensor::make(DType::kI32, int(shape.size()), shape.data()), v.data());
}

void probe(DType cache, int threads, int64_t ctx, int64_t fresh, int reps) {
  cpu::CpuDevice dev(threads);
  const int64_t Hq = 9, Hkv = 3, D = 64, bs = 16, nb = (ctx + bs - 1) / bs;
  std::mt19937 rng(11);
  std::vector<int32_t> table(static_cast<size_t>(nb)), slots;
  for (int64_t b = 0; b < nb; ++b) table[size_t(b)] = int32_t(b);
  std::shuffle(table.begin(), table.end(), rng);
  for (int64_t p = ctx - fresh; p < ctx; ++p) slots.push_back(int32_t(table[size_t(p / bs)] * bs + p % bs));
  const Tensor q = random_tensor(dev, DType::kF32, {fresh, Hq, D}, rng);
  const Tensor k = random_tensor(dev, DType::kF32, {fresh, Hkv, D}, rng);
  const Tensor v = random_tensor(dev, DType::kF32, {fresh, Hkv, D}, rng);
  const Tensor kc = random_tensor(dev, cache, {nb, bs, Hkv, D}, rng);
  const Tensor vc = random_tensor(dev, cache, {nb, bs, Hkv, D}, rng);
  const Tensor sm = i32_tensor(dev, {fresh}, slots), qs = i32_tensor(dev, {2}, {0, int32_t(fresh)});
  const Tensor sl = i32_tensor(dev, {1}, {int32_t(ctx)}), bt = i32_tensor(dev, {1, nb}, table);
  std::vector<double> times, ctimes;
  for (int r = 0; r < reps + 1; ++r) {
    Graph g;
    g.mark_output(g.attention({g.input(q), g.input(k), g.input(v), g.input(kc), g.input(vc), g.input(sm),
                               g.input(qs), g.input(sl), g.input(bt)},
                              AttentionParams{}));
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    const Status s = dev.compute(g);
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    const double csec = (process_cpu_seconds() - c0) / threads;
    if (!s.ok()) { std::printf("error: %s\n", s.to_string().c_str()); return; }
    if (r > 0) { times.push_back(sec); ctimes.push_back(csec); }
  }
  const double sec = median(times), csec = median(ctimes);
  const double flops = 4.0 * double(Hq * D) * double(fresh) * double(ctx);
  std::printf("cache=%-8s ctx=%lld new=%lld threads=%d: wall %8.2f ms (%.3f ms/query token) | cpu-time/threads %8.2f ms "
              "(%.3f ms/query token, %.2f GFLOP/s)\n",
              dtype_name(cache), (long long)ctx, (long long)fresh, threads, sec * 1e3, sec * 1e3 / double(fresh),
              csec * 1e3, csec * 1e3 / double(fresh), flops / csec / 1e9);
}
}  // namespace

int main(int argc, char** argv) {
  const int64_t ctx = argc > 1 ? std::atoll(argv[1]) : 4000, fresh = argc > 2 ? std::atoll(argv[2]) : 24;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 2, reps = argc > 4 ? std::atoi(argv[4]) : 10;
  for (DType cache : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8_E4M3, DType::kINT8_PC})
    probe(cache, threads, ctx, fresh, reps);
  return 0;
}

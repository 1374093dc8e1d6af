// The attention subcommand: paged attention at long context through the HAL, on any device. One
// sequence whose last |new| tokens (a prefill chunk) attend over |ctx| keys, with SmolLM2-135M's
// heads (9 query, 3 KV, head dim 64), 16-token blocks in shuffled order, for each KV-cache format
// the device supports. Prints wall time and CPU time / threads per call (medians after a warm-up;
// CPU time estimates the unloaded wall time on a shared machine), the device's own time where it
// has a clock (Device::time_compute), and the GFLOP/s of the 4 * Hq * D flops per (query, key)
// pair by the device time, else by CPU time / threads.
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "bench/commands.h"
#include "bench/timing.h"
#include "core/registry.h"
#include "quant/dtype.h"

namespace tessera::bench {
namespace {

// A device tensor of |shape| with values uniform in [-1, 1), quantised row by row into |dt|.
Result<Tensor> random_tensor(Device& dev, DType dt, const std::vector<int64_t>& shape, std::mt19937& rng) {
  const Tensor desc = Tensor::make(dt, int(shape.size()), shape.data());
  const auto& tr = dtype_traits(dt);
  if (!tr.quantize_row) return InvalidArgument(std::string("bench attention: no quantize_row for ") + dtype_name(dt));
  const int64_t D = shape.back(), rows = desc.numel() / D, rb = dtype_row_bytes(dt, D);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * rb));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(D));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = u(rng);
    tr.quantize_row(row.data(), bytes.data() + r * rb, D);
  }
  return upload_new(dev, desc, bytes.data());
}

Result<Tensor> i32_tensor(Device& dev, const std::vector<int64_t>& shape, const std::vector<int32_t>& v) {
  return upload_new(dev, Tensor::make(DType::kI32, int(shape.size()), shape.data()), v.data());
}

// One row of the table: |cache| at (ctx, fresh) on |dev|.
Status measure(Device& dev, DType cache, const AttentionBenchArgs& a) {
  const int64_t Hq = 9, Hkv = 3, D = 64, bs = 16, ctx = a.ctx, fresh = a.fresh, nb = (ctx + bs - 1) / bs;
  std::mt19937 rng(11);
  std::vector<int32_t> table(static_cast<size_t>(nb)), slots;
  for (int64_t b = 0; b < nb; ++b) table[size_t(b)] = int32_t(b);
  std::shuffle(table.begin(), table.end(), rng);
  for (int64_t p = ctx - fresh; p < ctx; ++p) slots.push_back(int32_t(table[size_t(p / bs)] * bs + p % bs));
  TS_ASSIGN_OR_RETURN(Tensor q, random_tensor(dev, DType::kF32, {fresh, Hq, D}, rng));
  TS_ASSIGN_OR_RETURN(Tensor k, random_tensor(dev, DType::kF32, {fresh, Hkv, D}, rng));
  TS_ASSIGN_OR_RETURN(Tensor v, random_tensor(dev, DType::kF32, {fresh, Hkv, D}, rng));
  TS_ASSIGN_OR_RETURN(Tensor kc, random_tensor(dev, cache, {nb, bs, Hkv, D}, rng));
  TS_ASSIGN_OR_RETURN(Tensor vc, random_tensor(dev, cache, {nb, bs, Hkv, D}, rng));
  TS_ASSIGN_OR_RETURN(Tensor sm, i32_tensor(dev, {fresh}, slots));
  TS_ASSIGN_OR_RETURN(Tensor qs, i32_tensor(dev, {2}, {0, int32_t(fresh)}));
  TS_ASSIGN_OR_RETURN(Tensor sl, i32_tensor(dev, {1}, {int32_t(ctx)}));
  TS_ASSIGN_OR_RETURN(Tensor bt, i32_tensor(dev, {1, nb}, table));
  const int threads = std::max(1, dev.info().threads);
  std::vector<double> wall, cpu, device;
  bool clock = true;  // until time_compute says the device has none
  for (int r = 0; r < a.repeats + 1; ++r) {  // the first call is a warm-up
    Graph g;
    g.mark_output(g.attention({g.input(q), g.input(k), g.input(v), g.input(kc), g.input(vc), g.input(sm),
                               g.input(qs), g.input(sl), g.input(bt)},
                              AttentionParams{}));
    const double c0 = process_cpu_seconds(), t0 = now_seconds();
    if (clock) {
      Result<double> t = dev.time_compute(g);
      if (t.ok() && r > 0) device.push_back(*t);
      if (!t.ok() && t.status().code() != StatusCode::kUnimplemented) return t.status();
      clock = t.ok();
      if (!clock) TS_RETURN_IF_ERROR(dev.compute(g));
    } else {
      TS_RETURN_IF_ERROR(dev.compute(g));
    }
    TS_RETURN_IF_ERROR(dev.synchronize());
    if (r == 0) continue;
    wall.push_back(now_seconds() - t0);
    cpu.push_back((process_cpu_seconds() - c0) / threads);
  }
  // The GFLOP/s are of the device's own time where it has a clock, else of CPU time / threads.
  const double w = median_of(wall), c = median_of(cpu), flops = 4.0 * double(Hq * D) * double(fresh) * double(ctx);
  const double basis = device.empty() ? c : median_of(device);
  std::printf("cache=%-8s ctx=%lld new=%lld: wall %8.2f ms (%.3f ms/query token) | cpu-time/threads %8.2f ms", dtype_name(cache),
              (long long)ctx, (long long)fresh, w * 1e3, w * 1e3 / double(fresh), c * 1e3);
  if (!device.empty()) std::printf(" | device %8.2f ms", basis * 1e3);
  std::printf(" (%.3f ms/query token, %.2f GFLOP/s)\n", basis * 1e3 / double(fresh), flops / std::max(basis, 1e-12) / 1e9);
  return OkStatus();
}

}  // namespace

int run_attention_bench(const AttentionBenchArgs& a) {
  if (a.ctx < 1 || a.fresh < 1 || a.fresh > a.ctx || a.repeats < 1) {
    std::fprintf(stderr, "tessera-bench attention: need 1 <= --new (%d) <= --ctx (%d) and --repeats >= 1 (%d)\n",
                 a.fresh, a.ctx, a.repeats);
    return 2;
  }
  // The CPU at the requested thread count; any other device as the registry opens it.
  Result<DevicePtr> dev = a.device == "cpu" ? Result<DevicePtr>(make_cpu_device(a.threads)) : Registry::global().find(a.device);
  if (!dev.ok()) {
    std::fprintf(stderr, "tessera-bench attention: %s\n", dev.status().to_string().c_str());
    return 1;
  }
  Device& d = **dev;
  std::printf("%s (%s), %d thread%s; heads 9/3, head dim 64, block 16; medians of %d calls\n", d.info().id.c_str(),
              d.info().name.c_str(), d.info().threads, d.info().threads == 1 ? "" : "s", a.repeats);
  int failed = 0;
  for (DType cache : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8_E4M3, DType::kINT8_PC}) {
    if (!d.supports(OpKind::kAttention, DType::kF32, cache)) {
      std::printf("cache=%-8s not supported by %s\n", dtype_name(cache), d.info().id.c_str());
      continue;
    }
    const Status s = measure(d, cache, a);
    if (!s.ok()) {
      std::printf("cache=%-8s failed: %s\n", dtype_name(cache), s.to_string().c_str());
      ++failed;
    }
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}

}  // namespace tessera::bench

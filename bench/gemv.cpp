// The gemv subcommand: achieved bandwidth of matmul with M = 1 for every weight format, at the
// Foundation issue's shapes, as GB/s and as a share of the measured peak read bandwidth at the
// same thread count.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>

#include "backends/cpu/cpu_device.h"
#include "bench/ceilings.h"
#include "bench/commands.h"
#include "bench/sweep.h"

namespace tessera::bench {

int run_gemv(const GemvArgs& a) {
  const size_t buffer_bytes = a.quick ? size_t(256) << 20 : size_t(1) << 30;
  const int repeats = a.quick ? 5 : 9;
  const size_t n = buffer_bytes / sizeof(float) / 256 * 256;
  std::map<int, Stat> peak;
  if (auto* buf = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)))) {
    bool touched = false;
    for (int t : a.threads) {
      if (t < 1) continue;
      peak[t] = cpu_read_bandwidth(buf, n, t, !touched, repeats);
      touched = true;
      std::printf("peak read bandwidth, %d thread%s: %.1f GB/s (spread %.1f%%%s)\n", t, t > 1 ? "s" : "",
                  peak[t].median, 100 * peak[t].spread, peak[t].noisy ? ", noisy" : "");
    }
    std::free(buf);
  }
  SweepOptions so;
  so.quick = a.quick;
  so.working_set_bytes = 4.0 * double(last_level_cache_bytes());
  so.budget_s = a.quick ? 0.1 : 0.5;
  so.skip_s = a.quick ? 0.5 : 10.0;
  so.verbose = false;
  const std::pair<int64_t, int64_t> shapes[] = {{2048, 2048}, {2048, 8192}, {8192, 2048}};  // N x K
  std::string csv = "threads,dtype,n_x_k,seconds,spread,gbs,pct_peak_read,status\n";
  std::printf("%-7s %-6s %11s %10s %9s %8s %7s\n", "threads", "dtype", "N x K", "time_us", "GB/s", "%peak", "spread");
  for (int t : a.threads) {
    if (t < 1) continue;
    cpu::CpuDevice device(t);
    DeviceReport ceilings;
    ceilings.bandwidth_gbs = peak.count(t) ? peak[t].median : 0.0;
    std::vector<KernelCase> cases;
    for (int i = 0; i < kNumDTypes; ++i) {
      const DType w = dtype_table()[i].dtype;
      if (!dtype_table()[i].quantize_row || !device.supports(OpKind::kMatmul, DType::kF32, w)) continue;
      for (auto [nn, kk] : shapes) {
        KernelCase c;
        c.model = "gemv", c.phase = "t" + std::to_string(t), c.name = std::to_string(nn) + "x" + std::to_string(kk);
        c.op = OpKind::kMatmul, c.weight = w, c.m = 1, c.n = nn, c.k = kk;
        cases.push_back(c);
      }
    }
    for (const KernelResult& r : run_sweep(device, ceilings, cases, so)) {
      const double pct = ceilings.bandwidth_gbs > 0 ? 100.0 * r.gbs / ceilings.bandwidth_gbs : 0.0;
      if (r.status == "ok")
        std::printf("%-7d %-6s %11s %10.1f %9.2f %7.1f%% %6.1f%%%s\n", t, r.weight_dtype.c_str(), r.name.c_str(),
                    r.seconds.median * 1e6, r.gbs, pct, 100 * r.seconds.spread,
                    r.seconds.n < 2 ? " (1 run)" : r.seconds.noisy ? " noisy" : "");
      else
        std::printf("%-7d %-6s %11s %s: %s\n", t, r.weight_dtype.c_str(), r.name.c_str(), r.status.c_str(),
                    r.note.c_str());
      char row[256];
      std::snprintf(row, sizeof row, "%d,%s,%s,%g,%g,%g,%g,%s\n", t, r.weight_dtype.c_str(), r.name.c_str(),
                    r.seconds.median, r.seconds.spread, r.gbs, pct, r.status.c_str());
      csv += row;
    }
  }
  if (!a.csv.empty()) {
    std::ofstream f(a.csv);
    f << csv;
    if (!f) {
      std::fprintf(stderr, "tessera-bench: %s: cannot write\n", a.csv.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace tessera::bench

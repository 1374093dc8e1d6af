// `tessera-bench split`: the cost of placing a model across two devices (docs/multi-device.md).
// For each --gpu-layers N (-1: the whole model on --device, the baseline), alternating rounds:
// prefill and decode tokens/s of one request, and per engine step the segments, the copies
// between devices, their bytes and their host time as a share of the step.
#include <algorithm>
#include <cstdio>
#include <map>

#include "bench/commands.h"
#include "bench/model_run.h"
#include "core/registry.h"

namespace tessera::bench {

int run_split_bench(const SplitBenchArgs& a) {
  auto main_dev = Registry::global().find(a.device);
  if (!main_dev.ok()) {
    std::fprintf(stderr, "tessera-bench: %s\n", main_dev.status().to_string().c_str());
    return 1;
  }
  DevicePtr host = make_cpu_device(a.threads);
  struct Row {
    std::vector<double> prefill, decode, copies, kbytes, copy_ms, copy_pct, wait_ms;
    int segments = 0;
    std::string placed;
  };
  std::map<int, Row> rows;
  for (int round = 0; round < a.repeats; ++round) {
    for (int n : a.gpu_layers) {
      LoadOptions lo;
      if (n >= 0) {
        lo.placement.host = host;
        lo.placement.main_layers = n;
      }
      auto m = Model::load(a.model, *main_dev, lo);
      if (!m.ok()) {
        std::fprintf(stderr, "tessera-bench: --gpu-layers %d: %s\n", n, m.status().to_string().c_str());
        return 1;
      }
      auto r = run_requests(**m, 1, a.prompt, a.decode);
      if (!r.ok()) {
        std::fprintf(stderr, "tessera-bench: %s\n", r.status().to_string().c_str());
        return 1;
      }
      const SplitStats& st = (*m)->split_stats();  // a model just loaded: this run's alone
      const double steps = double(std::max<int64_t>(1, r->steps));
      Row& row = rows[n];
      row.prefill.push_back(r->prefill_tps);
      row.decode.push_back(r->decode_tps);
      row.copies.push_back(double(st.copies) / steps);
      row.kbytes.push_back(double(st.copied_bytes) / 1e3 / steps);
      const double copy_s = st.copy_seconds;
      row.copy_ms.push_back(copy_s * 1e3 / steps);
      row.copy_pct.push_back(r->wall_s > 0 ? 100.0 * copy_s / r->wall_s : 0.0);
      row.wait_ms.push_back(st.wait_seconds * 1e3 / steps);
      row.segments = st.segments;
      row.placed = (*m)->placement().describe((*m)->config().n_layers);
    }
  }
  std::printf(
      "model: %s; main device %s, host %s (%d threads); 1 request, %d prompt + %d generated tokens, %d round(s)\n",
      a.model.c_str(), (*main_dev)->info().id.c_str(), host->info().id.c_str(), a.threads, a.prompt, a.decode,
      a.repeats);
  std::printf("%-10s %12s %12s %9s %12s %10s %13s %8s %13s  %s\n", "gpu-layers", "prefill t/s", "decode t/s",
              "segments", "copies/step", "KB/step", "copy ms/step", "copy %", "wait ms/step", "placement");
  for (int n : a.gpu_layers) {
    const Row& row = rows[n];
    std::printf("%-10d %12.1f %12.1f %9d %12.1f %10.1f %13.3f %7.2f%% %13.2f  %s\n", n, median_of(row.prefill),
                median_of(row.decode), row.segments, median_of(row.copies), median_of(row.kbytes),
                median_of(row.copy_ms), median_of(row.copy_pct), median_of(row.wait_ms), row.placed.c_str());
  }
  return 0;
}

}  // namespace tessera::bench

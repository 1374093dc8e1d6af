// The roofline and compare subcommands.
#include "bench/commands.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "bench/ceilings.h"
#include "bench/report.h"
#include "bench/sweep.h"
#include "bench/svg_plot.h"
#include "core/registry.h"

namespace tessera::bench {

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string host_description() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  return model + ", " + std::to_string(std::thread::hardware_concurrency()) + " CPUs, LLC " +
         std::to_string(last_level_cache_bytes() >> 20) + " MiB";
}

namespace {

std::string file_id(const std::string& id) {
  std::string s = id;
  for (char& c : s)
    if (c == ':' || c == '/') c = '_';
  return s;
}

Result<std::vector<DevicePtr>> select_devices(const std::vector<std::string>& specs) {
  const Registry& reg = Registry::global();
  std::vector<DevicePtr> out;
  for (const auto& spec : specs) {
    if (spec == "all") {
      for (const auto& e : reg.entries())
        if (!e.device) std::fprintf(stderr, "tessera-bench: %s unavailable: %s\n", e.id.c_str(), e.why.message().c_str());
      for (auto& d : reg.devices()) out.push_back(d);
      continue;
    }
    TS_ASSIGN_OR_RETURN(DevicePtr d, reg.find(spec));
    out.push_back(d);
  }
  if (out.empty()) return Unavailable("no usable device");
  return out;
}

DeviceReport measure_device(Device& device, bool quick, bool hal_only) {
  const DeviceInfo& info = device.info();
  DeviceReport d;
  d.id = info.id, d.name = info.name, d.kind = info.backend;
  d.threads = info.threads, d.emulated = info.emulated;
  CeilingOptions co;
  co.quick = quick;
  co.buffer_bytes = quick ? size_t(256) << 20 : size_t(1) << 30;
  co.repeats = quick ? 5 : 9;
  std::fprintf(stderr, "tessera-bench: %s: measuring ceilings\n", d.id.c_str());
  if (info.type == DeviceType::kCpu && info.threads > 0 && !hal_only) {
    d.ceilings = cpu_ceilings(std::max(1, info.threads), co);
    bool has_flops = false;
    for (const auto& c : d.ceilings) has_flops |= c.unit == "GFLOP/s";
    if (!has_flops)  // no oneDNN: the achieved peak through the HAL
      for (auto& c : hal_ceilings(device, co))
        if (c.unit == "GFLOP/s") d.ceilings.push_back(c);
  } else {
    d.ceilings = hal_ceilings(device, co);
  }
  set_roofline(d);
  SweepOptions so;
  so.quick = quick;
  const double llc = double(last_level_cache_bytes());
  so.working_set_bytes = (quick ? 2 : 4) * llc;
  so.budget_s = quick ? 0.08 : 0.25;
  so.skip_s = quick ? 0.1 : 3.0;
  so.max_set_bytes = quick ? double(256 << 20) : double(512 << 20);
  const auto cases = sweep_cases(device, quick);
  std::fprintf(stderr, "tessera-bench: %s: %zu kernels, working set %.0f MiB\n", d.id.c_str(), cases.size(),
               so.working_set_bytes / (1 << 20));
  d.kernels = run_sweep(device, d, cases, so);
  return d;
}

// The SVGs of |run|: one per device, one per device and model, one overlay of all devices.
Status write_plots(const RunReport& run, const std::string& dir) {
  Status s;
  std::vector<const DeviceReport*> all;
  for (const auto& d : run.devices) {
    all.push_back(&d);
    const std::string title = "Roofline: " + d.id + " (" + d.name + ")" + (run.quick ? " [quick]" : "");
    if (s.ok()) s = write_file(dir + "roofline-" + file_id(d.id) + ".svg", roofline_svg({&d}, title));
    // One plot per model as well: a full sweep puts hundreds of points on the device plot.
    std::map<std::string, DeviceReport> by_model;
    for (const auto& k : d.kernels) {
      auto [it, fresh] = by_model.try_emplace(k.model, d);
      if (fresh) it->second.kernels.clear();
      it->second.kernels.push_back(k);
    }
    for (const auto& [model, md] : by_model)
      if (s.ok())
        s = write_file(dir + "roofline-" + file_id(d.id) + "-" + model + ".svg", roofline_svg({&md}, title + ": " + model));
  }
  if (s.ok()) s = write_file(dir + "roofline-all.svg", roofline_svg(all, "Roofline: all devices"));
  return s;
}

}  // namespace

int run_roofline(const RooflineArgs& a) {
  auto devices = select_devices(a.devices);
  if (!devices.ok()) {
    std::fprintf(stderr, "tessera-bench: %s\n", devices.status().to_string().c_str());
    return 1;
  }
  std::error_code ec;
  std::filesystem::create_directories(a.out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "tessera-bench: %s: cannot create: %s\n", a.out_dir.c_str(), ec.message().c_str());
    return 1;
  }
  RunReport run;
  run.tool = "tessera-bench 0.1.0";
  run.created = utc_now();
  run.host = host_description();
  run.quick = a.quick;
  for (auto& dev : *devices) {
    run.devices.push_back(measure_device(*dev, a.quick, a.hal_ceilings));
    std::printf("%s\n", format_table(run.devices.back()).c_str());
  }
  const std::string dir = a.out_dir + "/";
  Status s = write_file(dir + "roofline.json", to_json(run));
  if (s.ok()) s = write_file(dir + "roofline.csv", to_csv(run));
  if (s.ok()) s = write_plots(run, dir);
  if (!s.ok()) {
    std::fprintf(stderr, "tessera-bench: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("wrote %sroofline.json, roofline.csv and the SVG plots\n", dir.c_str());
  return 0;
}

int run_plot(const PlotArgs& a) {
  auto run = read_report(a.json);
  Status s = run.ok() ? write_plots(*run, a.out_dir + "/") : run.status();
  if (!s.ok()) {
    std::fprintf(stderr, "tessera-bench: %s\n", s.to_string().c_str());
    return 1;
  }
  std::printf("wrote the SVG plots of %s to %s\n", a.json.c_str(), a.out_dir.c_str());
  return 0;
}

int run_compare(const CompareArgs& a) {
  auto ra = read_report(a.a);
  auto rb = ra.ok() ? read_report(a.b) : ra;
  if (!ra.ok() || !rb.ok()) {
    std::fprintf(stderr, "tessera-bench: %s\n", (!ra.ok() ? ra : rb).status().to_string().c_str());
    return 1;
  }
  auto c = compare_reports(*ra, a.device_a, *rb, a.device_b);
  if (!c.ok()) {
    std::fprintf(stderr, "tessera-bench: %s\n", c.status().to_string().c_str());
    return 1;
  }
  std::printf("%s", format_comparison(*c).c_str());
  return 0;
}

}  // namespace tessera::bench

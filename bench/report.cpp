#include "bench/report.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera::bench {

using nlohmann::json;

namespace {

std::string dtype_class(const std::string& dtype) {
  if (dtype == "f32") return "f32";
  if (dtype == "f16" || dtype == "bf16") return "bf16";
  if (dtype == "i8" || dtype.rfind("q", 0) == 0) return "int8";
  return "f32";
}

json stat_json(const Stat& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"spread", s.spread}, {"n", s.n}, {"noisy", s.noisy}};
}

Stat stat_from(const json& j) {
  Stat s;
  s.median = j.at("median").get<double>();
  s.min = j.at("min").get<double>();
  s.max = j.at("max").get<double>();
  s.spread = j.at("spread").get<double>();
  s.n = j.at("n").get<int>();
  s.noisy = j.at("noisy").get<bool>();
  return s;
}

json kernel_json(const KernelResult& k) {
  return {{"key", k.key},         {"model", k.model},
          {"phase", k.phase},     {"name", k.name},
          {"op", k.op},           {"act_dtype", k.act_dtype},
          {"weight_dtype", k.weight_dtype}, {"shape", k.shape},
          {"bytes", k.cost.bytes}, {"flops", k.cost.flops},
          {"intensity", k.cost.intensity()}, {"copies", k.copies},
          {"working_set_bytes", k.working_set_bytes}, {"status", k.status},
          {"note", k.note},       {"seconds", stat_json(k.seconds)},
          {"gbs", k.gbs},         {"gflops", k.gflops},
          {"ceiling", k.ceiling}, {"roofline_gflops", k.roofline_gflops},
          {"pct_roofline", k.pct_roofline}, {"bound", k.bound}};
}

KernelResult kernel_from(const json& j) {
  KernelResult k;
  k.key = j.at("key").get<std::string>();
  k.model = j.at("model").get<std::string>();
  k.phase = j.at("phase").get<std::string>();
  k.name = j.at("name").get<std::string>();
  k.op = j.at("op").get<std::string>();
  k.act_dtype = j.at("act_dtype").get<std::string>();
  k.weight_dtype = j.at("weight_dtype").get<std::string>();
  k.shape = j.at("shape").get<std::string>();
  k.cost.bytes = j.at("bytes").get<double>();
  k.cost.flops = j.at("flops").get<double>();
  k.copies = j.at("copies").get<int>();
  k.working_set_bytes = j.at("working_set_bytes").get<double>();
  k.status = j.at("status").get<std::string>();
  k.note = j.at("note").get<std::string>();
  k.seconds = stat_from(j.at("seconds"));
  k.gbs = j.at("gbs").get<double>();
  k.gflops = j.at("gflops").get<double>();
  k.ceiling = j.at("ceiling").get<std::string>();
  k.roofline_gflops = j.at("roofline_gflops").get<double>();
  k.pct_roofline = j.at("pct_roofline").get<double>();
  k.bound = j.at("bound").get<std::string>();
  return k;
}

json device_json(const DeviceReport& d) {
  json ceilings = json::array();
  for (const auto& c : d.ceilings)
    ceilings.push_back({{"name", c.name}, {"unit", c.unit}, {"method", c.method}, {"value", stat_json(c.value)}});
  json kernels = json::array();
  for (const auto& k : d.kernels) kernels.push_back(kernel_json(k));
  return {{"id", d.id},
          {"name", d.name},
          {"kind", d.kind},
          {"threads", d.threads},
          {"emulated", d.emulated},
          {"roofline", {{"bandwidth_gbs", d.bandwidth_gbs}, {"compute_gflops", d.compute_gflops}}},
          {"ceilings", ceilings},
          {"kernels", kernels}};
}

DeviceReport device_from(const json& j) {
  DeviceReport d;
  d.id = j.at("id").get<std::string>();
  d.name = j.at("name").get<std::string>();
  d.kind = j.at("kind").get<std::string>();
  d.threads = j.at("threads").get<int>();
  d.emulated = j.at("emulated").get<bool>();
  d.bandwidth_gbs = j.at("roofline").at("bandwidth_gbs").get<double>();
  d.compute_gflops = j.at("roofline").at("compute_gflops").get<std::map<std::string, double>>();
  for (const auto& c : j.at("ceilings"))
    d.ceilings.push_back({c.at("name").get<std::string>(), c.at("unit").get<std::string>(),
                          c.at("method").get<std::string>(), stat_from(c.at("value"))});
  for (const auto& k : j.at("kernels")) d.kernels.push_back(kernel_from(k));
  return d;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string compute_ceiling_for(const DeviceReport& d, const std::string& weight_dtype, const std::string& op) {
  if (d.compute_gflops.empty()) return {};
  const bool has_weight = op == "matmul" || op == "matmul_id";
  if (has_weight && d.compute_gflops.count(weight_dtype)) return weight_dtype;
  const std::string cls = has_weight ? dtype_class(weight_dtype) : "f32";
  if (d.compute_gflops.count(cls)) return cls;
  if (cls == "bf16" && d.compute_gflops.count("f16")) return "f16";
  if (d.compute_gflops.count("f32")) return "f32";
  return d.compute_gflops.begin()->first;
}

void finish_kernel(const DeviceReport& d, KernelResult& k) {
  k.ceiling = compute_ceiling_for(d, k.weight_dtype, k.op);
  const double peak = k.ceiling.empty() ? 0.0 : d.compute_gflops.at(k.ceiling);
  const double ai = k.cost.intensity();
  k.bound = bound_by(ai, d.bandwidth_gbs, peak);
  // A kernel without arithmetic (embed) is held to the bandwidth alone.
  k.roofline_gflops = k.cost.flops > 0 ? attainable_flops(ai, d.bandwidth_gbs, peak) : 0.0;
  if (k.status != "ok" || k.seconds.median <= 0) return;
  k.gbs = k.cost.bytes / k.seconds.median / 1e9;
  k.gflops = k.cost.flops / k.seconds.median / 1e9;
  if (k.cost.flops > 0 && k.roofline_gflops > 0)
    k.pct_roofline = 100.0 * k.gflops / k.roofline_gflops;
  else if (d.bandwidth_gbs > 0)
    k.pct_roofline = 100.0 * k.gbs / d.bandwidth_gbs;
}

std::string to_json(const RunReport& r) {
  json devices = json::array();
  for (const auto& d : r.devices) devices.push_back(device_json(d));
  json j = {{"schema_version", r.schema_version}, {"tool", r.tool}, {"created", r.created},
            {"host", r.host}, {"quick", r.quick}, {"devices", devices}};
  return j.dump(1) + "\n";
}

Result<RunReport> from_json(const std::string& text, const std::string& source_name) {
  try {
    const json j = json::parse(text);
    RunReport r;
    r.schema_version = j.at("schema_version").get<int>();
    if (r.schema_version != kSchemaVersion)
      return InvalidArgument(source_name + ": schema_version " + std::to_string(r.schema_version) +
                             ", this tessera-bench reads " + std::to_string(kSchemaVersion));
    r.tool = j.at("tool").get<std::string>();
    r.created = j.at("created").get<std::string>();
    r.host = j.at("host").get<std::string>();
    r.quick = j.at("quick").get<bool>();
    for (const auto& d : j.at("devices")) r.devices.push_back(device_from(d));
    return r;
  } catch (const json::exception& e) {
    return InvalidArgument(source_name + ": not a tessera-bench report: " + e.what());
  }
}

Result<RunReport> read_report(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json(ss.str(), path);
}

Status write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return InvalidArgument(path + ": cannot open for writing");
  f << text;
  f.close();
  if (!f) return DataLoss(path + ": write failed");
  return OkStatus();
}

std::string to_csv(const RunReport& r) {
  std::string out =
      "device,key,model,phase,name,op,act_dtype,weight_dtype,shape,status,bytes,flops,intensity,"
      "seconds_median,seconds_spread,noisy,gbs,gflops,ceiling,roofline_gflops,pct_roofline,bound,copies,"
      "working_set_bytes,note\n";
  auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  for (const auto& d : r.devices)
    for (const auto& k : d.kernels) {
      std::ostringstream row;
      row.precision(6);
      row << d.id << ',' << k.key << ',' << k.model << ',' << k.phase << ',' << k.name << ',' << k.op << ','
          << k.act_dtype << ',' << k.weight_dtype << ',' << quoted(k.shape) << ',' << k.status << ','
          << k.cost.bytes << ',' << k.cost.flops << ',' << k.cost.intensity() << ',' << k.seconds.median << ','
          << k.seconds.spread << ',' << (k.seconds.noisy ? 1 : 0) << ',' << k.gbs << ',' << k.gflops << ','
          << k.ceiling << ',' << k.roofline_gflops << ',' << k.pct_roofline << ',' << k.bound << ','
          << k.copies << ',' << k.working_set_bytes << ',' << quoted(k.note) << '\n';
      out += row.str();
    }
  return out;
}

std::string format_table(const DeviceReport& d) {
  std::string out = "== " + d.id + ": " + d.name + "\n";
  for (const auto& c : d.ceilings)
    out += "  " + c.name + std::string(c.name.size() < 10 ? 10 - c.name.size() : 0, ' ') +
           fmt("%10.1f ", c.value.median) + c.unit + fmt("  spread %5.1f%%", 100 * c.value.spread) +
           (c.value.noisy ? "  NOISY" : "") + "  (" + c.method + ")\n";
  out += fmt("  roofline: bandwidth %.1f GB/s", d.bandwidth_gbs);
  for (const auto& [name, g] : d.compute_gflops) out += ", " + name + fmt(" %.3g GFLOP/s", g);
  out += "\n";
  char line[320];
  std::snprintf(line, sizeof line, "  %-46s %-10s %10s %9s %8s %9s %7s %6s %s\n", "kernel", "op", "time_us",
                "GB/s", "FLOP/B", "GFLOP/s", "%roof", "bound", "spread");
  out += line;
  for (const auto& k : d.kernels) {
    if (k.status != "ok") {
      std::snprintf(line, sizeof line, "  %-46s %-10s %s: %s\n", k.key.c_str(), k.op.c_str(), k.status.c_str(),
                    k.note.c_str());
    } else {
      std::snprintf(line, sizeof line, "  %-46s %-10s %10.1f %9.2f %8.3f %9.2f %6.1f%% %6s %5.1f%%%s\n",
                    k.key.c_str(), k.op.c_str(), k.seconds.median * 1e6, k.gbs, k.cost.intensity(), k.gflops,
                    k.pct_roofline, k.bound.c_str(), 100 * k.seconds.spread,
                    k.seconds.n < 2 ? " (1 run)" : k.seconds.noisy ? " noisy" : "");
    }
    out += line;
  }
  return out;
}

namespace {
Result<const DeviceReport*> pick_device(const RunReport& r, const std::string& id, const std::string& which) {
  if (r.devices.empty()) return InvalidArgument(which + ": the report has no devices");
  if (id.empty()) return &r.devices.front();
  std::string have;
  for (const auto& d : r.devices) {
    if (d.id == id) return &d;
    have += (have.empty() ? "" : ", ") + d.id;
  }
  return NotFound(which + ": no device '" + id + "' in the report (it has: " + have + ")");
}
}  // namespace

Result<Comparison> compare_reports(const RunReport& a, const std::string& dev_a, const RunReport& b,
                                   const std::string& dev_b) {
  TS_ASSIGN_OR_RETURN(const DeviceReport* da, pick_device(a, dev_a, "A"));
  TS_ASSIGN_OR_RETURN(const DeviceReport* db, pick_device(b, dev_b, "B"));
  Comparison c;
  c.device_a = da->id;
  c.device_b = db->id;
  std::map<std::string, const KernelResult*> by_key;
  for (const auto& k : db->kernels)
    if (k.status == "ok" && k.seconds.median > 0) by_key[k.key] = &k;
  double log_sum = 0;
  int matched_b = 0;
  for (const auto& ka : da->kernels) {
    if (ka.status != "ok" || ka.seconds.median <= 0) continue;
    auto it = by_key.find(ka.key);
    if (it == by_key.end()) {
      ++c.only_in_a;
      continue;
    }
    const KernelResult& kb = *it->second;
    ++matched_b;
    CompareRow row{ka.key, ka.seconds.median, kb.seconds.median, ka.seconds.median / kb.seconds.median,
                   ka.seconds.noisy || kb.seconds.noisy};
    log_sum += std::log(row.ratio);
    c.rows.push_back(row);
  }
  c.only_in_b = int(by_key.size()) - matched_b;
  if (!c.rows.empty()) c.geomean_ratio = std::exp(log_sum / double(c.rows.size()));
  return c;
}

std::string format_comparison(const Comparison& c) {
  std::string out = "A = " + c.device_a + ", B = " + c.device_b + "; ratio = time A / time B (> 1: B is faster)\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %-50s %12s %12s %8s\n", "kernel", "A_us", "B_us", "ratio");
  out += line;
  for (const auto& r : c.rows) {
    std::snprintf(line, sizeof line, "  %-50s %12.1f %12.1f %8.3f%s\n", r.key.c_str(), r.seconds_a * 1e6,
                  r.seconds_b * 1e6, r.ratio, r.noisy ? "  noisy" : "");
    out += line;
  }
  out += fmt("  geometric mean ratio %.3f", c.geomean_ratio) + " over " + std::to_string(c.rows.size()) +
         " kernels; only in A: " + std::to_string(c.only_in_a) + ", only in B: " + std::to_string(c.only_in_b) + "\n";
  return out;
}

}  // namespace tessera::bench

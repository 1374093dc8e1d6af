// The results of a tessera-bench run and their files: JSON (schema in docs/bench.md), CSV, the
// console table, and the per-kernel comparison of two runs or two devices.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "bench/roofline_model.h"
#include "core/status.h"

namespace tessera::bench {

inline constexpr int kSchemaVersion = 1;

// One ceiling of a device's roofline, e.g. "read" in GB/s or "int8" in GFLOP/s.
struct Ceiling {
  std::string name;    // "read", "read_1t", "copy", "f32", "bf16", "int8", or a dtype name
  std::string unit;    // "GB/s" or "GFLOP/s"
  std::string method;  // how it was measured, in words
  Stat value;          // in |unit|
};

struct KernelResult {
  std::string key;      // "<model>/<phase>/<name>/<weight dtype>": stable across runs and devices
  std::string model;    // "smollm2-135m"
  std::string phase;    // "decode-b8", "prefill-512"
  std::string name;     // "ffn_up", "attn_q", "lm_head", "attention", ...
  std::string op;       // the graph op: "matmul", "matmul_id", "attention", ...
  std::string act_dtype;
  std::string weight_dtype;  // the second input's dtype (cache dtype for attention)
  std::string shape;    // "M=8 N=1536 K=576" or similar, for people
  Cost cost;
  int copies = 0;               // distinct input sets rotated through
  double working_set_bytes = 0; // copies * bytes of one input set
  std::string status;           // "ok", "skipped", "failed"
  std::string note;             // why skipped/failed, or a caveat
  Stat seconds;                 // per call
  // Derived from the above and the device's ceilings (filled by finish_kernel).
  double gbs = 0;                // achieved, bytes / median seconds / 1e9
  double gflops = 0;             // achieved
  std::string ceiling;           // the compute ceiling used
  double roofline_gflops = 0;    // attainable at this intensity
  double pct_roofline = 0;       // achieved / attainable * 100
  std::string bound;             // "memory" or "compute"
};

struct DeviceReport {
  std::string id;       // "cpu", "vulkan:0"
  std::string name;
  std::string kind;
  int threads = 0;
  bool emulated = false;
  double bandwidth_gbs = 0;                     // the roofline's bandwidth ceiling
  std::map<std::string, double> compute_gflops; // the roofline's compute ceilings by name
  std::vector<Ceiling> ceilings;                // every measured figure
  std::vector<KernelResult> kernels;
};

struct RunReport {
  int schema_version = kSchemaVersion;
  std::string tool;     // "tessera-bench 0.1.0"
  std::string created;  // UTC, ISO 8601
  std::string host;     // CPU model, cores, LLC
  bool quick = false;
  std::vector<DeviceReport> devices;
};

// The compute ceiling a kernel is held to: the dtype's own name if the device measured one
// (GPUs: per weight dtype), else its class (f32; f16/bf16 -> bf16 then f16; block formats and
// i8 -> int8), else f32. Empty when the device has no compute ceiling at all.
std::string compute_ceiling_for(const DeviceReport& d, const std::string& weight_dtype, const std::string& op);

// Fills the derived fields of |k| from its cost, time and |d|'s ceilings.
void finish_kernel(const DeviceReport& d, KernelResult& k);

std::string to_json(const RunReport& r);  // pretty-printed
Result<RunReport> from_json(const std::string& text, const std::string& source_name);
Result<RunReport> read_report(const std::string& path);
Status write_file(const std::string& path, const std::string& text);

// One CSV row per (device, kernel) with a header row.
std::string to_csv(const RunReport& r);
// The console table of one device: ceilings, then kernels.
std::string format_table(const DeviceReport& d);

// The kernels two runs (or two devices of one run) share, with time_a / time_b (> 1: B faster).
struct CompareRow {
  std::string key;
  double seconds_a = 0;
  double seconds_b = 0;
  double ratio = 0;
  bool noisy = false;  // either side was noisy
};
struct Comparison {
  std::string device_a, device_b;
  std::vector<CompareRow> rows;
  double geomean_ratio = 0;  // over the rows; 0 when there are none
  int only_in_a = 0, only_in_b = 0;
};
// Picks device |dev_a| of |a| and |dev_b| of |b| ("" = the only or first device).
Result<Comparison> compare_reports(const RunReport& a, const std::string& dev_a, const RunReport& b,
                                   const std::string& dev_b);
std::string format_comparison(const Comparison& c);

}  // namespace tessera::bench

// The tessera-bench subcommands; each returns the process exit status.
#pragma once
#include <string>
#include <vector>

namespace tessera::bench {

struct RooflineArgs {
  std::vector<std::string> devices = {"all"};
  std::string out_dir = "bench-out";
  bool quick = false;
  bool hal_ceilings = false;  // measure the CPU's ceilings through the HAL too (the generic path)
};
int run_roofline(const RooflineArgs& a);

struct GemvArgs {
  std::vector<int> threads = {1, 2};
  bool quick = false;
  std::string csv;  // optional output file
};
int run_gemv(const GemvArgs& a);

struct PlotArgs {
  std::string json;
  std::string out_dir = ".";
};
int run_plot(const PlotArgs& a);  // redraws the SVGs of a saved report

struct CompareArgs {
  std::string a, b;
  std::string device_a, device_b;
};
int run_compare(const CompareArgs& a);

struct ModelBenchArgs {
  std::string model;
  std::vector<int> threads = {1, 2};
  std::vector<int> concurrency = {1, 4};
  int prompt = 128;
  int decode = 32;
  int repeats = 3;
};
int run_model_bench(const ModelBenchArgs& a);

struct MoeBenchArgs {
  std::string moe, dense;  // GGUF files: the MoE and a dense model of equal active parameters
  int threads = 2;
  int prompt = 128;
  int decode = 32;
  int repeats = 3;
};
int run_moe_bench(const MoeBenchArgs& a);

// "AMD EPYC ... , 2 CPUs, LLC 32 MiB" for reports.
std::string host_description();
// Current UTC time, ISO 8601.
std::string utc_now();

}  // namespace tessera::bench

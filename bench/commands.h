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
  std::vector<std::string> dtypes;  // weight formats to measure (empty: every one the CPU supports)
  bool no_gemm = false;             // GEMV only
  bool quick = false;
  bool rows = false;                // weights in GGUF rows (no Device::prepare_weight)
  std::vector<int64_t> gemm_m;      // extra GEMM row counts, each timed prepared and in rows
  std::string isa;                  // force the CPU kernels' SIMD target (avx2, avx3, avx3_dl, scalar)
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
  std::string isa;  // force the CPU kernels' SIMD target (as GemvArgs::isa)
};
int run_model_bench(const ModelBenchArgs& a);

// `tessera-bench contention`: batch-1 prefill and decode tokens/s beside 0, 1, 2 busy processes
// the bench starts and stops itself, for the default settings and each fixed thread count, and
// llama.cpp (llama-bench) when the peer is built. See bench/contention_bench.cpp.
struct ContentionBenchArgs {
  std::string model;
  std::vector<int> threads = {1, 2};  // fixed counts (TESSERA_CPU_ADAPT=0)
  std::vector<int> busy = {0, 1, 2};  // busy background processes
  int prompt = 128;
  int decode = 64;
  int repeats = 3;
  int max_seconds = 900;  // a busy process ends by itself after this long
  std::string peer;       // llama-bench binary (default: found under ~/.cache/tessera-peer)
  bool no_peer = false;
};
int run_contention_bench(const ContentionBenchArgs& a);

// `tessera-bench serve`: drives a `tessera serve` (its own child from --model, or --url) over
// loopback with streamed completions. See docs/serving.md.
struct ServeBenchArgs {
  std::string model;        // start a server on this GGUF file ...
  std::string url;          // ... or use the one at http://HOST:PORT
  std::string server_bin;   // the tessera binary (default: next to tessera-bench)
  std::string device = "cpu";
  std::vector<std::string> server_args;  // passed through to `tessera serve`
  std::string scenario = "load";         // load, prefix, chunked
  std::string out_dir = "bench-out";
  std::vector<int> concurrency = {1, 4, 16, 64};
  int requests = 0;         // per level; 0: max(8, 4 x concurrency)
  int prompt_len = 128;     // prompt tokens: uniform in prompt_len x [1 - spread, 1 + spread]
  double prompt_spread = 0.5;
  int output_len = 64;      // output tokens, the same way
  double output_spread = 0.5;
  int token_lo = 32, token_hi = 256;  // prompt token ids are drawn from [lo, hi)
  uint64_t seed = 1;
  // > 0: request i of a level runs under LoRA adapter i % request_loras (llama.cpp's "lora"
  // field, ids as the server lists them); 0: the base model.
  int request_loras = 0;
  double slo_ttft_ms = 2000;  // goodput counts requests meeting both
  double slo_tpot_ms = 200;
  // prefix scenario
  int prefix_len = 1000, suffix_len = 32, rounds = 3;
  // prefix scenario: requests sharing the prefix (with their own suffixes) before the measured one.
  // Two, so a hybrid model's recurrent state is checkpointed where prompts part (the branch point
  // is known once two prompts have parted there; core/kv/state_manager.h).
  int warm = 2;
  // chunked scenario
  int decodes = 8, long_prompt = 4000;
};
int run_serve_bench(const ServeBenchArgs& a);

struct MoeBenchArgs {
  std::string moe, dense;  // GGUF files: the MoE and a dense model of equal active parameters
  int threads = 2;
  int prompt = 128;
  int decode = 32;
  int repeats = 3;
};
int run_moe_bench(const MoeBenchArgs& a);

// `tessera-bench split`: a model placed across --device and the CPU at several --gpu-layers
// (docs/multi-device.md) against the whole model on --device: prefill and decode tokens/s, and
// the copies between devices per step (count, bytes, time as % of the step).
struct SplitBenchArgs {
  std::string model;
  std::string device = "vulkan";
  std::vector<int> gpu_layers = {-1, 0};  // -1: the whole model on --device (the baseline row)
  int threads = 2;
  int prompt = 32;
  int decode = 8;
  int repeats = 1;  // alternating rounds over the placements (median)
};
int run_split_bench(const SplitBenchArgs& a);

// `tessera-bench attention`: paged attention of a prefill chunk over a long context, per KV-cache
// format, through the HAL.
struct AttentionBenchArgs {
  std::string device = "cpu";  // "cpu" is built with --threads; others as the registry opens them
  int threads = 2;
  int ctx = 4000;   // keys the chunk attends over (the chunk included)
  int fresh = 24;   // query tokens: the chunk's last tokens
  int repeats = 10;
};
int run_attention_bench(const AttentionBenchArgs& a);

// `tessera-bench recurrent`: a Gated DeltaNet layer's two recurrent ops (ssm_conv, then the gated
// delta rule) over one sequence's prefill, at Qwen3.5-2B's heads by default, in the CPU's
// token-by-token and chunked forms (TESSERA_CPU_GDN_CHUNKED), alternating. See
// bench/recurrent_bench.cpp.
struct RecurrentBenchArgs {
  std::string device = "cpu";
  int threads = 2;
  int tokens = 512;             // the prefill run
  int hk = 16, hv = 16, dk = 128, dv = 128;
  int repeats = 5;
};
int run_recurrent_bench(const RecurrentBenchArgs& a);

// "AMD EPYC ... , 2 CPUs, LLC 32 MiB" for reports.
std::string host_description();
// Current UTC time, ISO 8601.
std::string utc_now();

}  // namespace tessera::bench

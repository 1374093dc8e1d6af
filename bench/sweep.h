// The kernel sweep: every kernel family at the shapes of real models, decode and prefill, for
// every weight format a device supports, timed through the HAL (Graph + Device::compute).
#pragma once
#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/roofline_model.h"
#include "core/device.h"

namespace tessera::bench {

struct ModelShape {
  std::string name;
  int64_t dim, q_heads, kv_heads, head_dim, ffn, vocab;
  int64_t experts = 0, experts_used = 0;  // MoE: expert FFN width is |ffn|
};

// A step shape: |seqs| sequences of |new_tokens| each, with |context| tokens of KV per sequence.
struct Phase {
  std::string name;
  int64_t seqs, new_tokens, context;
};

// One kernel to measure. The dims used depend on |op| (see sweep.cpp: build_case).
struct KernelCase {
  std::string model, phase, name;
  OpKind op = OpKind::kMatmul;
  DType act = DType::kF32;
  DType weight = DType::kF32;  // the weight (matmul, matmul_id, embed) or KV cache (attention)
  int64_t m = 0, n = 0, k = 0;            // matmul [M,K] x [N,K]; matmul_id T=m; elementwise rows=m cols=n
  int64_t experts = 0, slots = 0;         // matmul_id
  int64_t heads = 0, head_dim = 0;        // rope
  AttentionShape attn;                    // attention
  int64_t vocab = 0;                      // embed table rows
};

std::vector<ModelShape> sweep_models(bool quick);
std::vector<Phase> sweep_phases(bool quick);
// The cases for |device|: every weight dtype of the dtype table the device supports.
std::vector<KernelCase> sweep_cases(const Device& device, bool quick);

Cost case_cost(const KernelCase& c);
std::string case_shape(const KernelCase& c);
std::string case_key(const KernelCase& c);
// Bytes of one input set (whole tables and caches, not just what is read).
double case_set_bytes(const KernelCase& c);

struct SweepOptions {
  bool quick = false;
  double working_set_bytes = 128 << 20;  // rotate input sets until they span this much
  double max_set_bytes = 512 << 20;      // skip a kernel whose single input set is larger
  double budget_s = 0.4;                 // time per kernel
  double skip_s = 5.0;                   // skip a kernel predicted to take longer per call
  bool verbose = true;                   // progress on stderr
};

// Runs the cases and returns one result per case (ok, skipped or failed), in case order;
// derived figures are filled from |ceilings|.
std::vector<KernelResult> run_sweep(Device& device, const DeviceReport& ceilings, const std::vector<KernelCase>& cases,
                                    const SweepOptions& options);

// Builds the graph of |c| with inputs from |placer| (used by the sweep, gemv and the HAL ceilings).
class InputPlacer;
Result<Graph> build_case(const KernelCase& c, InputPlacer& placer);

// The last-level cache size from /sys/devices/system/cpu/cpu0/cache (bytes; 32 MiB if unknown).
int64_t last_level_cache_bytes();

}  // namespace tessera::bench

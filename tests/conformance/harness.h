// The conformance suite: every op x dtype x awkward shape, on every device the registry finds,
// compared with the scalar reference (core/reference). Written once; each backend runs it
// unchanged. A device that lacks an op of the set fails (coverage_test.cpp), it is not skipped.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/graph.h"
#include "tests/support/test_support.h"

namespace tessera::conformance {

// Builds the same graph, with the same seeded random inputs, on any device.
class CaseContext {
 public:
  CaseContext(Device& device, uint64_t seed) : device_(device), rng_(seed) {}
  Graph& graph() { return graph_; }
  Device& device() { return device_; }
  testing::Rng& rng() { return rng_; }

  // A random external tensor in [lo, hi), encoded into |dtype|.
  ValueId input(DType dtype, std::initializer_list<int64_t> shape, float lo = -1.0f, float hi = 1.0f);
  ValueId input_values(DType dtype, std::initializer_list<int64_t> shape, const std::vector<float>& values);
  // A random matmul weight like input(), passed through the device's prepare_weight (its own
  // layout where it repacks one, e.g. the CPU's row tiles).
  ValueId prepared_weight(DType dtype, std::initializer_list<int64_t> shape, OpKind use = OpKind::kMatmul);
  // Random i32 in [0, max_exclusive).
  ValueId ids(std::initializer_list<int64_t> shape, int32_t max_exclusive);
  ValueId i32_values(std::initializer_list<int64_t> shape, const std::vector<int32_t>& values);
  // A random [rows, cols] tensor seen through a view whose row stride is |pad| elements wider
  // than cols (a non-contiguous input).
  ValueId strided_rows(DType dtype, int64_t rows, int64_t cols, int64_t pad);
  // |status| of the last upload/alloc problem (tests assert it is OK).
  const Status& status() const { return status_; }

 private:
  ValueId put(const Tensor& desc, const std::vector<uint8_t>& bytes);
  Device& device_;
  Graph graph_;
  testing::Rng rng_;
  Status status_;
};

struct Case {
  std::string name;   // "matmul/w=q4_0/a=f32/M=1,N=33,K=96"
  OpKind op;
  DType act;
  DType weight;
  uint64_t seed = 1;
  // Builds the graph; returns the values to compare (marked as outputs where intermediate,
  // plus any external it mutates, such as the KV cache).
  std::function<std::vector<ValueId>(CaseContext&)> build;
  double tolerance = 0.0;  // NMSE; 0 means tolerance_for(act, weight)
};

// Normalised-MSE tolerance for an activation/weight dtype pair.
double tolerance_for(DType act, DType weight);

// Runs |c| on |device| and on the reference; returns an empty string on success, else a
// message naming op, dtypes, shape, device, seed and the error.
std::string run_case(Device& device, const Case& c);

// The case lists, one per op family.
std::vector<Case> linear_cases();     // embed, matmul, matmul_id
std::vector<Case> pointwise_cases();  // rms_norm, rope, glu, add, mul, scale, softmax, cast, copy
std::vector<Case> attention_cases();  // attention
std::vector<Case> moe_cases();        // topk_route (+ matmul_id routed by it)
std::vector<Case> recurrent_cases();  // ssm_conv, gated_delta_net
std::vector<Case> lora_cases();       // lora

// Activation dtypes every op runs with, and weight dtypes every backend must support.
const std::vector<DType>& activation_dtypes();
const std::vector<DType>& required_weight_dtypes();
// Every weight format of quant/ (float and block formats). The ones outside
// required_weight_dtypes() run only on devices that claim them (supports()).
const std::vector<DType>& all_weight_dtypes();
bool is_required_weight(DType w);
// |k| rounded up to a whole number of |w|'s blocks (so one shape list serves every format).
int64_t fit_k(DType w, int64_t k);

// Devices under test: every usable device of the registry (TESSERA_TEST_DEVICE=id restricts).
std::vector<DevicePtr> devices_under_test();

}  // namespace tessera::conformance

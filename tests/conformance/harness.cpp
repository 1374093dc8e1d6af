#include "tests/conformance/harness.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/reference/reference.h"
#include "core/registry.h"

namespace tessera::conformance {

using testing::Rng;

ValueId CaseContext::put(const Tensor& desc, const std::vector<uint8_t>& bytes) {
  auto t = upload_new(device_, desc, bytes.data());
  if (!t.ok()) {
    if (status_.ok()) status_ = t.status();
    return kNoValue;
  }
  return graph_.input(*t);
}

ValueId CaseContext::input(DType dtype, std::initializer_list<int64_t> shape, float lo, float hi) {
  const Tensor desc = Tensor::make(dtype, shape);
  return put(desc, testing::encode(desc, testing::random_floats(rng_, desc.numel(), lo, hi)));
}

ValueId CaseContext::prepared_weight(DType dtype, std::initializer_list<int64_t> shape, OpKind use) {
  const Tensor desc = Tensor::make(dtype, shape);
  auto t = upload_new(device_, desc, testing::encode(desc, testing::random_floats(rng_, desc.numel())).data());
  if (t.ok()) t = device_.prepare_weight(*t, use);
  if (!t.ok()) {
    if (status_.ok()) status_ = t.status();
    return kNoValue;
  }
  return graph_.input(*t);
}

ValueId CaseContext::input_values(DType dtype, std::initializer_list<int64_t> shape, const std::vector<float>& values) {
  const Tensor desc = Tensor::make(dtype, shape);
  return put(desc, testing::encode(desc, values));
}

ValueId CaseContext::ids(std::initializer_list<int64_t> shape, int32_t max_exclusive) {
  const Tensor desc = Tensor::make(DType::kI32, shape);
  std::uniform_int_distribution<int32_t> d(0, max_exclusive - 1);
  std::vector<float> v(static_cast<size_t>(desc.numel()));
  for (auto& x : v) x = float(d(rng_));
  return put(desc, testing::encode(desc, v));
}

ValueId CaseContext::i32_values(std::initializer_list<int64_t> shape, const std::vector<int32_t>& values) {
  const Tensor desc = Tensor::make(DType::kI32, shape);
  std::vector<float> v(values.begin(), values.end());
  return put(desc, testing::encode(desc, v));
}

ValueId CaseContext::strided_rows(DType dtype, int64_t rows, int64_t cols, int64_t pad) {
  const ValueId base = input(dtype, {rows, cols + pad});
  const int64_t es = dtype_traits(dtype).block_bytes;
  return graph_.view(base, {rows, cols}, {(cols + pad) * es, es}, 0);
}

// NMSE tolerances. The reference dequantises the same weight bytes exactly, so a weight
// format's own quantisation error never enters; what differs is how the backend treats the
// activations and sums:
// - f32 activations with float weights: only summation order (1e-10); f16/bf16 activations
//   round their inputs (1e-5, 1e-4).
// - f16/bf16 weights, and FP8 weights (which decode exactly to f16, so a backend may run them
//   on an f16 or f32 path): 2e-5, for backends that round products or partial sums to f16.
// - every other block format: backends may quantise activations to int8 per 32-block (the CPU
//   does). That rounding has step amax/127, so its error variance is step^2/12; on the suite's
//   uniform [-1, 1) inputs that is (1/127)^2/12 / (1/3) ~ 1.9e-5 of the signal, and a dot product
//   of such errors has the same relative NMSE. Measured on the CPU, every format alike: ~2e-5
//   typically, up to 6.5e-5 on the 13-value outputs (few samples, so a noisy estimate). 2e-4
//   leaves a margin of 3x and still catches a wrong scale, code or sub-block: swapping the two
//   per-16 scales of a Q6_K sub-block on purpose gave NMSE 6e-3 (every Q6_K case failed).
//   The MoE block case chains three such matmuls and sets its own tolerance (moe_test.cpp).
double tolerance_for(DType act, DType weight) {
  double tol = act == DType::kF32 ? 1e-10 : act == DType::kF16 ? 1e-5 : 1e-4;
  if (weight == DType::kF16 || weight == DType::kBF16 || weight == DType::kFP8_E4M3 || weight == DType::kFP8_E5M2)
    tol = std::max(tol, 2e-5);
  else if (dtype_traits(weight).is_quantized)
    tol = std::max(tol, 2e-4);
  return tol;
}

namespace {
struct RunResult {
  Status status;
  std::vector<std::vector<double>> outputs;
  std::vector<std::string> shapes;
};

RunResult run_on(Device& device, const Case& c) {
  RunResult r;
  CaseContext ctx(device, c.seed);
  const std::vector<ValueId> compare = c.build(ctx);
  if (!ctx.status().ok()) { r.status = ctx.status(); return r; }
  for (ValueId v : compare)
    if (v != kNoValue && ctx.graph().value(v).kind != Value::Kind::kExternal) ctx.graph().mark_output(v);
  if (!ctx.graph().status().ok()) { r.status = ctx.graph().status(); return r; }
  r.status = device.compute(ctx.graph());
  if (r.status.ok()) r.status = device.synchronize();
  if (!r.status.ok()) return r;
  for (ValueId v : compare) {
    const Tensor& t = ctx.graph().tensor(v);
    r.outputs.push_back(testing::download_values(device, t));
    r.shapes.push_back(t.shape_string());
  }
  return r;
}
}  // namespace

std::string run_case(Device& device, const Case& c) {
  std::ostringstream where;
  where << c.name << " [op=" << op_name(c.op) << " act=" << dtype_name(c.act) << " weight=" << dtype_name(c.weight)
        << " device=" << device.info().id << " seed=" << c.seed << "]";
  ref::ReferenceDevice reference;
  const RunResult want = run_on(reference, c);
  if (!want.status.ok()) return where.str() + ": the reference failed: " + want.status.to_string();
  const RunResult got = run_on(device, c);
  if (!got.status.ok()) return where.str() + ": " + got.status.to_string();
  const double tol = c.tolerance > 0.0 ? c.tolerance : tolerance_for(c.act, c.weight);
  std::ostringstream err;
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    const auto& a = got.outputs[i];
    const auto& b = want.outputs[i];
    if (a.size() != b.size() || a.empty()) {
      err << " output " << i << " " << want.shapes[i] << ": got " << a.size() << " values, want " << b.size() << ";";
      continue;
    }
    if (!testing::all_finite(a)) { err << " output " << i << " " << want.shapes[i] << ": non-finite values;"; continue; }
    const double e = testing::nmse(a, b);
    if (!(e <= tol))
      err << " output " << i << " " << want.shapes[i] << ": nmse " << e << " > tolerance " << tol
          << " (max abs diff " << testing::max_abs_diff(a, b) << ");";
  }
  return err.str().empty() ? std::string() : where.str() + ":" + err.str();
}

const std::vector<DType>& activation_dtypes() {
  static const std::vector<DType> v = {DType::kF32, DType::kF16, DType::kBF16};
  return v;
}

const std::vector<DType>& required_weight_dtypes() {
  static const std::vector<DType> v = {DType::kF32, DType::kF16, DType::kBF16,
                                       DType::kQ8_0, DType::kQ4_0, DType::kQ4_1};
  return v;
}

const std::vector<DType>& all_weight_dtypes() {
  static const std::vector<DType> v = [] {
    std::vector<DType> out;
    for (int i = 0; i < kNumDTypes; ++i) {
      const DTypeTraits& t = dtype_table()[i];
      if ((t.is_float || t.is_quantized) && t.dequantize_row) out.push_back(t.dtype);
    }
    return out;
  }();
  return v;
}

bool is_required_weight(DType w) {
  const auto& req = required_weight_dtypes();
  return std::find(req.begin(), req.end(), w) != req.end();
}

int64_t fit_k(DType w, int64_t k) {
  const int64_t be = dtype_traits(w).block_elems;
  return (k + be - 1) / be * be;
}

std::vector<DevicePtr> devices_under_test() {
  std::vector<DevicePtr> out;
  const char* only = std::getenv("TESSERA_TEST_DEVICE");
  // The reference device is what every device is compared with: tested only when asked for.
  for (const DeviceEntry& e : Registry::global().entries())
    if (e.device && (!only || !*only ? !e.device->info().by_name_only : e.id == only || e.backend == only))
      out.push_back(e.device);
  return out;
}

}  // namespace tessera::conformance

// Conformance cases for rms_norm, layer_norm, gelu, rope, glu, add, mul, scale, softmax, cast and copy.
#include "tests/conformance/conformance_test.h"

namespace tessera::conformance {

std::vector<Case> pointwise_cases() {
  std::vector<Case> cases;
  uint64_t seed = 2000;
  using V = std::vector<ValueId>;
  for (DType a : activation_dtypes()) {
    const std::string at = std::string("/a=") + dtype_name(a);
    // rms_norm: one row, odd width, wide rows, no weight, strided rows, 3-D (QK-norm per head).
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 576}, {7, 33}, {3, 4096}})
      cases.push_back({"rms_norm" + at + "/" + std::to_string(rows) + "x" + std::to_string(cols), OpKind::kRmsNorm, a, a,
                       ++seed, [=](CaseContext& c) {
                         return V{c.graph().rms_norm(c.input(a, {rows, cols}), c.input(DType::kF32, {cols}), 1e-5f)};
                       }});
    cases.push_back({"rms_norm" + at + "/no weight", OpKind::kRmsNorm, a, a, ++seed,
                     [=](CaseContext& c) { return V{c.graph().rms_norm(c.input(a, {4, 64}), kNoValue, 1e-6f)}; }});
    cases.push_back({"rms_norm" + at + "/strided", OpKind::kRmsNorm, a, a, ++seed, [=](CaseContext& c) {
                       return V{c.graph().rms_norm(c.strided_rows(a, 5, 48, 16), c.input(a, {48}), 1e-5f)};
                     }});
    cases.push_back({"rms_norm" + at + "/per head [T,H,D]", OpKind::kRmsNorm, a, a, ++seed, [=](CaseContext& c) {
                       return V{c.graph().rms_norm(c.input(a, {3, 4, 64}), c.input(DType::kF32, {64}), 1e-6f)};
                     }});
    // layer_norm: weight and bias (BERT), an offset mean (centring must not lose precision),
    // neither, strided rows.
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 384}, {7, 33}, {3, 4096}})
      cases.push_back({"layer_norm" + at + "/" + std::to_string(rows) + "x" + std::to_string(cols), OpKind::kLayerNorm,
                       a, a, ++seed, [=](CaseContext& c) {
                         return V{c.graph().layer_norm(c.input(a, {rows, cols}, 3.0f, 5.0f), c.input(DType::kF32, {cols}),
                                                       c.input(DType::kF32, {cols}), 1e-12f)};
                       }});
    cases.push_back({"layer_norm" + at + "/no weight or bias", OpKind::kLayerNorm, a, a, ++seed, [=](CaseContext& c) {
                       return V{c.graph().layer_norm(c.input(a, {4, 64}), kNoValue, kNoValue, 1e-5f)};
                     }});
    cases.push_back({"layer_norm" + at + "/strided", OpKind::kLayerNorm, a, a, ++seed, [=](CaseContext& c) {
                       return V{c.graph().layer_norm(c.strided_rows(a, 5, 48, 16), c.input(a, {48}), c.input(a, {48}), 1e-5f)};
                     }});
    cases.push_back({"gelu" + at, OpKind::kGelu, a, a, ++seed,
                     [=](CaseContext& c) { return V{c.graph().gelu(c.input(a, {5, 77}, -6.0f, 6.0f))}; }});
    cases.push_back({"gelu" + at + "/strided", OpKind::kGelu, a, a, ++seed,
                     [=](CaseContext& c) { return V{c.graph().gelu(c.strided_rows(a, 4, 40, 8))}; }});
    // rope: both layouts, partial rotation, YaRN, freq factors, large positions.
    struct RopeCase { const char* name; RopeMode mode; int64_t D; int n_dims; float ext; bool ff; };
    for (const RopeCase& r : {RopeCase{"normal", RopeMode::kNormal, 64, 64, 0.0f, false},
                              RopeCase{"neox", RopeMode::kNeox, 64, 64, 0.0f, false},
                              RopeCase{"neox partial", RopeMode::kNeox, 80, 32, 0.0f, false},
                              RopeCase{"normal yarn", RopeMode::kNormal, 64, 64, 1.0f, false},
                              RopeCase{"neox freq_factors", RopeMode::kNeox, 128, 128, 0.0f, true}}) {
      cases.push_back({std::string("rope") + at + "/" + r.name, OpKind::kRope, a, a, ++seed, [=](CaseContext& c) {
                         RopeParams p;
                         p.mode = r.mode;
                         p.n_dims = r.n_dims;
                         p.freq_base = 100000.0f;
                         if (r.ext > 0.0f) {
                           p.ext_factor = r.ext;
                           p.freq_scale = 0.25f;
                           p.n_ctx_orig = 4096;
                         }
                         const ValueId x = c.input(a, {6, 3, r.D});
                         const ValueId pos = c.i32_values({6}, {0, 1, 7, 100, 4095, 31999});
                         const ValueId ff = r.ff ? c.input(DType::kF32, {r.n_dims / 2}, 1.0f, 8.0f) : kNoValue;
                         return V{c.graph().rope(x, pos, p, ff)};
                       }});
    }
    // glu
    for (GluKind k : {GluKind::kSilu, GluKind::kGelu, GluKind::kSigmoid})
      cases.push_back({std::string(k == GluKind::kSilu ? "swiglu" : k == GluKind::kGelu ? "geglu" : "sigmoid_glu") + at, OpKind::kGlu, a, a, ++seed,
                       [=](CaseContext& c) {
                         return V{c.graph().glu(c.input(a, {5, 77}, -6.0f, 6.0f), c.input(a, {5, 77}), k)};
                       }});
    // gpt-oss's clamped SwiGLU: inputs past +-limit on both sides exercise both clamps; a second
    // (alpha, limit) pair checks that the params reach the kernel.
    for (const GluParams gp :
         {GluParams{GluKind::kSwigluOai, 1.702f, 7.0f}, GluParams{GluKind::kSwigluOai, 0.9f, 2.5f}})
      cases.push_back(
          {"swiglu_oai" + at + "/limit " + std::to_string(int(gp.limit * 10)), OpKind::kGlu, a, a, ++seed,
           [=](CaseContext& c) {
             return V{c.graph().glu(c.input(a, {6, 83}, -11.0f, 11.0f), c.input(a, {6, 83}, -9.0f, 9.0f), gp)};
           }});
    // add / mul: same shape, row broadcast, strided operand.
    for (OpKind op : {OpKind::kAdd, OpKind::kMul}) {
      const std::string on = op_name(op);
      cases.push_back({on + at + "/same", op, a, a, ++seed, [=](CaseContext& c) {
                         const ValueId x = c.input(a, {7, 45}), y = c.input(a, {7, 45});
                         return V{op == OpKind::kAdd ? c.graph().add(x, y) : c.graph().mul(x, y)};
                       }});
      cases.push_back({on + at + "/broadcast row", op, a, a, ++seed, [=](CaseContext& c) {
                         const ValueId x = c.input(a, {2, 3, 45}), y = c.input(DType::kF32, {45});
                         return V{op == OpKind::kAdd ? c.graph().add(x, y) : c.graph().mul(x, y)};
                       }});
      cases.push_back({on + at + "/strided", op, a, a, ++seed, [=](CaseContext& c) {
                         const ValueId x = c.strided_rows(a, 4, 40, 8), y = c.input(a, {4, 40});
                         return V{op == OpKind::kAdd ? c.graph().add(x, y) : c.graph().mul(x, y)};
                       }});
    }
    cases.push_back({"scale" + at, OpKind::kScale, a, a, ++seed,
                     [=](CaseContext& c) { return V{c.graph().scale(c.input(a, {3, 101}), -0.37f)}; }});
    // Gemma's final logit softcap: inputs well past the cap, so tanh saturates on some.
    cases.push_back({"scale" + at + "/softcap", OpKind::kScale, a, a, ++seed, [=](CaseContext& c) {
                       return V{c.graph().scale(c.input(a, {3, 257}, -90.0f, 90.0f), 0.5f, 30.0f)};
                     }});
    for (int64_t n : {int64_t(1), int64_t(37), int64_t(5000)})
      cases.push_back({"softmax" + at + "/n=" + std::to_string(n), OpKind::kSoftmax, a, a, ++seed, [=](CaseContext& c) {
                         return V{c.graph().softmax(c.input(a, {3, n}, -8.0f, 8.0f), 0.7f)};
                       }});
    for (DType to : activation_dtypes())
      cases.push_back({"cast" + at + "/to " + dtype_name(to), OpKind::kCast, a, to, ++seed,
                       [=](CaseContext& c) { return V{c.graph().cast(c.input(a, {5, 39}, -100.0f, 100.0f), to)}; }});
    cases.push_back({"copy" + at + "/strided rows", OpKind::kCopy, a, a, ++seed,
                     [=](CaseContext& c) { return V{c.graph().copy(c.strided_rows(a, 6, 30, 5))}; }});
    cases.push_back({"copy" + at + "/transpose", OpKind::kCopy, a, a, ++seed, [=](CaseContext& c) {
                       const ValueId x = c.input(a, {4, 6});
                       const int64_t es = dtype_traits(a).block_bytes;
                       return V{c.graph().copy(c.graph().view(x, {6, 4}, {es, 6 * es}, 0))};
                     }});
  }
  return cases;
}

TESSERA_CONFORMANCE_SUITE(Pointwise, pointwise_cases);

}  // namespace tessera::conformance

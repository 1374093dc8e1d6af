// Conformance cases for the recurrent layers' ops, ssm_conv and gated_delta_net: a batch of
// sequences mixing a decode, a fresh prefill and a chunk continuing from a non-zero state, their
// state rows in shuffled slots of a pool with spare rows; the output and the updated state are
// both compared.
#include <algorithm>
#include <numeric>

#include "tests/conformance/conformance_test.h"

namespace tessera::conformance {

namespace {
struct Batch {
  std::vector<int32_t> qstart = {0}, slots;
  int64_t T = 0;
  int64_t n_slots = 0;
};

// Rows per sequence; state rows shuffled among lens.size() + 2 slots.
Batch make_batch(CaseContext& c, const std::vector<int32_t>& lens) {
  Batch b;
  b.n_slots = int64_t(lens.size()) + 2;
  std::vector<int32_t> perm(size_t(b.n_slots));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), c.rng());
  for (size_t s = 0; s < lens.size(); ++s) {
    b.qstart.push_back(b.qstart.back() + lens[s]);
    b.slots.push_back(perm[s]);
  }
  b.T = b.qstart.back();
  return b;
}

struct ConvShape {
  const char* name;
  int64_t C, K;
  std::vector<int32_t> lens;
  bool silu;
};

std::vector<ValueId> build_conv(CaseContext& c, const ConvShape& s, DType act) {
  const Batch b = make_batch(c, s.lens);
  const ValueId x = c.input(act, {b.T, s.C}, -2.0f, 2.0f);
  const ValueId w = c.input(DType::kF32, {s.C, s.K}, -0.7f, 0.7f);
  const ValueId st = c.input(DType::kF32, {b.n_slots, s.K - 1, s.C}, -2.0f, 2.0f);
  const int64_t S = int64_t(s.lens.size());
  SsmConvParams p;
  p.silu = s.silu;
  const ValueId out = c.graph().ssm_conv({x, w, st, c.i32_values({S + 1}, b.qstart), c.i32_values({S}, b.slots)}, p);
  return {out, st};
}

struct GdnShape {
  const char* name;
  int64_t Hk, Hv, Dk, Dv;
  std::vector<int32_t> lens;
  bool gated;  // decay from A * softplus(alpha + dt_bias), else alpha is the log-decay
  float q_scale = 0.0f;
  bool tiled = false;
};

std::vector<ValueId> build_gdn(CaseContext& c, const GdnShape& s, DType act) {
  const Batch b = make_batch(c, s.lens);
  const int64_t S = int64_t(s.lens.size());
  Graph::GatedDeltaNetInputs in{};
  in.q = c.input(act, {b.T, s.Hk, s.Dk});
  in.k = c.input(act, {b.T, s.Hk, s.Dk});
  in.v = c.input(act, {b.T, s.Hv, s.Dv}, -2.0f, 2.0f);
  in.alpha = s.gated ? c.input(act, {b.T, s.Hv}, -3.0f, 3.0f) : c.input(act, {b.T, s.Hv}, -1.5f, 0.0f);
  in.beta = c.input(act, {b.T, s.Hv}, -4.0f, 4.0f);
  in.decay_rate = s.gated ? c.input(DType::kF32, {s.Hv}, -2.0f, -0.05f) : kNoValue;
  in.dt_bias = s.gated ? c.input(DType::kF32, {s.Hv}, -1.0f, 1.0f) : kNoValue;
  in.state = c.input(DType::kF32, {b.n_slots, s.Hv, s.Dk, s.Dv}, -0.5f, 0.5f);
  in.query_start = c.i32_values({S + 1}, b.qstart);
  in.state_slots = c.i32_values({S}, b.slots);
  GatedDeltaNetParams p;
  p.q_scale = s.q_scale;
  p.tiled_heads = s.tiled;
  const ValueId out = c.graph().gated_delta_net(in, p);
  return {out, in.state};
}
}  // namespace

std::vector<Case> recurrent_cases() {
  const std::vector<ConvShape> convs = {
      {"mixed k4 silu", 96, 4, {1, 7, 20}, true},
      {"decodes k4", 64, 4, {1, 1, 1}, true},
      {"prefill k3 plain", 40, 3, {13, 2}, false},
      {"short rows k4", 33, 4, {2, 1}, true},  // fewer rows than the state holds
  };
  const std::vector<GdnShape> gdns = {
      {"mixed gated", 2, 4, 32, 48, {1, 9, 33}, true},
      {"decodes gated", 2, 2, 64, 64, {1, 1, 1, 1}, true},
      {"prefill plain", 1, 3, 16, 24, {17, 5}, false, 0.5f},
      {"qwen3.5 heads", 1, 2, 128, 128, {1, 6}, true},
      {"tiled heads", 2, 6, 16, 8, {3, 1, 12}, true, 0.0f, true},
      // Long runs: the CPU's chunked form (64-token chunks, a partial last chunk) beside a decode.
      {"long prefill gated", 2, 4, 32, 40, {150, 1, 64, 17}, true},
      {"long prefill plain", 1, 2, 24, 16, {97, 130}, false, 0.5f},
      {"long tiled qwen3.5 heads", 1, 2, 128, 128, {70, 1}, true, 0.0f, true},
  };
  std::vector<Case> cases;
  uint64_t seed = 9000;
  for (DType a : activation_dtypes()) {
    const std::string at = std::string("/a=") + dtype_name(a) + "/";
    for (const ConvShape& s : convs)
      cases.push_back({"ssm_conv" + at + s.name, OpKind::kSsmConv, a, DType::kF32, ++seed,
                       [=](CaseContext& c) { return build_conv(c, s, a); }});
    for (const GdnShape& s : gdns)
      cases.push_back({"gated_delta_net" + at + s.name, OpKind::kGatedDeltaNet, a, DType::kF32, ++seed,
                       [=](CaseContext& c) { return build_gdn(c, s, a); }});
  }
  return cases;
}

TESSERA_CONFORMANCE_SUITE(Recurrent, recurrent_cases);

}  // namespace tessera::conformance

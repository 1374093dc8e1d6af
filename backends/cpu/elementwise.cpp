// glu (SwiGLU / GeGLU / sigmoid gate / gpt-oss's clamped SwiGLU), gelu (erf form), add and mul with trailing-dim
// broadcast, scale, softmax. Rows go through f32 (load_row_f32 handles dtypes and strides); the math is SIMD per row.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/elementwise.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "backends/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// NOTE: Highway's Exp is only specified up to +104; silu clamps its argument so huge negative
// gates give 0 instead of garbage.
HWY_INLINE VF silu(DF df, VF x) {
  const VF e = hn::Exp(df, hn::Min(hn::Neg(x), hn::Set(df, 88.0f)));
  return hn::Div(x, hn::Add(hn::Set(df, 1.0f), e));
}
HWY_INLINE VF gelu_tanh(DF df, VF x) {
  const VF inner = hn::Mul(hn::Set(df, 0.7978845608028654f), hn::MulAdd(hn::Mul(hn::Set(df, 0.044715f), x), hn::Mul(x, x), x));
  const VF t = hn::Tanh(df, hn::Clamp(inner, hn::Set(df, -20.0f), hn::Set(df, 20.0f)));
  return hn::Mul(hn::Mul(hn::Set(df, 0.5f), x), hn::Add(hn::Set(df, 1.0f), t));
}
float silu_scalar(float x) { return x / (1.0f + std::exp(std::min(-x, 88.0f))); }
float gelu_scalar(float x) {
  return 0.5f * x * (1.0f + std::tanh(std::clamp(0.7978845608028654f * (x + 0.044715f * x * x * x), -20.0f, 20.0f)));
}

HWY_INLINE VF sigmoid(DF df, VF x) {
  const VF e = hn::Exp(df, hn::Min(hn::Neg(x), hn::Set(df, 88.0f)));
  return hn::Div(hn::Set(df, 1.0f), hn::Add(hn::Set(df, 1.0f), e));
}
float sigmoid_scalar(float x) { return 1.0f / (1.0f + std::exp(std::min(-x, 88.0f))); }

// gpt-oss: g = min(gate, limit), u = clamp(up, -limit, limit), g * sigmoid(alpha g) * (u + 1).
void SwigluOaiRow(const GluParams& p, const float* gate, const float* up, float* out, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  const VF lim = hn::Set(df, p.limit), nlim = hn::Set(df, -p.limit), al = hn::Set(df, p.alpha), one = hn::Set(df, 1.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const VF x = hn::Min(hn::LoadU(df, gate + i), lim);
    const VF u = hn::Clamp(hn::LoadU(df, up + i), nlim, lim);
    hn::StoreU(hn::Mul(hn::Mul(x, sigmoid(df, hn::Mul(al, x))), hn::Add(u, one)), df, out + i);
  }
  for (; i < n; ++i) {
    const float x = std::min(gate[i], p.limit), u = std::clamp(up[i], -p.limit, p.limit);
    out[i] = x * sigmoid_scalar(p.alpha * x) * (u + 1.0f);
  }
}

void GluRow(const GluParams& p, const float* gate, const float* up, float* out, int64_t n) {
  const GluKind kind = p.kind;
  if (kind == GluKind::kSwigluOai) return SwigluOaiRow(p, gate, up, out, n);
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const VF x = hn::LoadU(df, gate + i);
    const VF a = kind == GluKind::kSilu ? silu(df, x) : kind == GluKind::kSigmoid ? sigmoid(df, x) : gelu_tanh(df, x);
    hn::StoreU(hn::Mul(a, hn::LoadU(df, up + i)), df, out + i);
  }
  for (; i < n; ++i)
    out[i] = (kind == GluKind::kSilu      ? silu_scalar(gate[i])
              : kind == GluKind::kSigmoid ? sigmoid_scalar(gate[i])
                                          : gelu_scalar(gate[i])) *
             up[i];
}

// The exact GELU, 0.5 x (1 + erf(x / sqrt 2)). Highway 1.0 has no Erf: std::erf per element,
// which costs little next to the FFN matmuls around it.
void GeluRow(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}

void BinaryRow(bool is_add, const float* a, const float* b, float* out, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  int64_t i = 0;
  if (is_add) {
    for (; i + L <= n; i += L) hn::StoreU(hn::Add(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, out + i);
    for (; i < n; ++i) out[i] = a[i] + b[i];
  } else {
    for (; i + L <= n; i += L) hn::StoreU(hn::Mul(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, out + i);
    for (; i < n; ++i) out[i] = a[i] * b[i];
  }
}

void ScaleRow(const float* x, float s, float* out, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), hn::Set(df, s)), df, out + i);
  for (; i < n; ++i) out[i] = x[i] * s;
}

void SoftmaxRow(const float* x, float scale, float* out, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  const VF vs = hn::Set(df, scale);
  VF vmax = hn::Set(df, -HUGE_VALF);
  int64_t i = 0;
  for (; i + L <= n; i += L) vmax = hn::Max(vmax, hn::Mul(hn::LoadU(df, x + i), vs));
  float mx = hn::GetLane(hn::MaxOfLanes(df, vmax));
  for (; i < n; ++i) mx = std::max(mx, x[i] * scale);
  const VF vm = hn::Set(df, mx);
  VF vsum = hn::Zero(df);
  for (i = 0; i + L <= n; i += L) {
    const VF e = hn::Exp(df, hn::Sub(hn::Mul(hn::LoadU(df, x + i), vs), vm));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, df, out + i);
  }
  float sum = reduce_sum(df, vsum);
  for (; i < n; ++i) {
    out[i] = std::exp(x[i] * scale - mx);
    sum += out[i];
  }
  ScaleRow(out, 1.0f / sum, out, n);
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(GluRow);
HWY_EXPORT(GeluRow);
HWY_EXPORT(BinaryRow);
HWY_EXPORT(ScaleRow);
HWY_EXPORT(SoftmaxRow);

namespace {
// Runs |row_fn(r, tmp_a, tmp_b, result)| over the rows of |out| on the pool, then stores result.
template <class F>
void for_rows(ThreadPool& pool, const Tensor& out, F&& row_fn) {
  const int64_t rows = out.rows(), cols = out.cols();
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, cols));
  pool.parallel_for(rows, grain, [&](int64_t r0, int64_t r1, int) {
    float* ta = thread_scratch(0, cols);
    float* tb = thread_scratch(1, cols);
    float* scratch = thread_scratch(2, cols);
    for (int64_t r = r0; r < r1; ++r) {
      float* res = out_row_f32(out, r, scratch);
      row_fn(r, ta, tb, res);
      finish_row_f32(out, r, res);
    }
  });
}
}  // namespace

Status glu(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& gate = g.input_tensor(n, 0);
  const Tensor& up = g.input_tensor(n, 1);
  const GluParams& gp = n.param<GluParams>();
  for_rows(pool, g.output_tensor(n), [&](int64_t r, float* ta, float* tb, float* res) {
    HWY_DYNAMIC_DISPATCH(GluRow)(gp, load_row_f32(gate, r, ta), load_row_f32(up, r, tb), res, gate.cols());
  });
  return OkStatus();
}

Status gelu(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, 0);
  for_rows(pool, g.output_tensor(n), [&](int64_t r, float* ta, float*, float* res) {
    HWY_DYNAMIC_DISPATCH(GeluRow)(load_row_f32(x, r, ta), res, x.cols());
  });
  return OkStatus();
}

Status binary(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& a = g.input_tensor(n, 0);
  const Tensor& b = g.input_tensor(n, 1);
  const bool is_add = n.op == OpKind::kAdd;
  const int64_t b_rows = b.rows();
  for_rows(pool, g.output_tensor(n), [&](int64_t r, float* ta, float* tb, float* res) {
    // b's shape is a suffix of a's, so a's flat row r maps to b's flat row r % b.rows().
    HWY_DYNAMIC_DISPATCH(BinaryRow)(is_add, load_row_f32(a, r, ta), load_row_f32(b, r % b_rows, tb), res, a.cols());
  });
  return OkStatus();
}

Status scale(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, 0);
  const float s = n.param<ScaleParams>().scale, cap = n.param<ScaleParams>().softcap;
  for_rows(pool, g.output_tensor(n), [&](int64_t r, float* ta, float*, float* res) {
    HWY_DYNAMIC_DISPATCH(ScaleRow)(load_row_f32(x, r, ta), s, res, x.cols());
    // NOTE: scalar tanh; the softcap runs once per step on the sampled rows' logits.
    if (cap > 0)
      for (int64_t i = 0; i < x.cols(); ++i) res[i] = cap * std::tanh(res[i] / cap);
  });
  return OkStatus();
}

Status softmax(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, 0);
  const float s = n.param<SoftmaxParams>().scale;
  for_rows(pool, g.output_tensor(n), [&](int64_t r, float* ta, float*, float* res) {
    HWY_DYNAMIC_DISPATCH(SoftmaxRow)(load_row_f32(x, r, ta), s, res, x.cols());
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

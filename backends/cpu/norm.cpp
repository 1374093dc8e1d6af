// rms_norm: x / sqrt(mean(x^2) + eps) * w over the last dim, one SIMD pass for the sum of
// squares and one for the scaling. layer_norm: (x - mean) / sqrt(var + eps) * w + b, with the
// variance taken in a second pass over the centred row (stable for rows with a large mean).
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/norm.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// |w| may be null (no weight).
void RmsNormRow(const float* x, const float* w, float eps, float* out, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    const VF a = hn::LoadU(df, x + i), b = hn::LoadU(df, x + i + L);
    acc0 = hn::MulAdd(a, a, acc0);
    acc1 = hn::MulAdd(b, b, acc1);
  }
  for (; i + L <= n; i += L) {
    const VF a = hn::LoadU(df, x + i);
    acc0 = hn::MulAdd(a, a, acc0);
  }
  double ss = reduce_sum(df, hn::Add(acc0, acc1));
  for (; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  const VF vinv = hn::Set(df, inv);
  for (i = 0; i + L <= n; i += L) {
    VF v = hn::Mul(hn::LoadU(df, x + i), vinv);
    if (w) v = hn::Mul(v, hn::LoadU(df, w + i));
    hn::StoreU(v, df, out + i);
  }
  for (; i < n; ++i) out[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

// |w| and |b| may be null.
void LayerNormRow(const float* x, const float* w, const float* b, float eps, float* out, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  VF acc = hn::Zero(df);
  int64_t i = 0;
  for (; i + L <= n; i += L) acc = hn::Add(acc, hn::LoadU(df, x + i));
  double sum = reduce_sum(df, acc);
  for (; i < n; ++i) sum += x[i];
  const float mean = float(sum / double(n));
  const VF vmean = hn::Set(df, mean);
  acc = hn::Zero(df);
  for (i = 0; i + L <= n; i += L) {
    const VF d = hn::Sub(hn::LoadU(df, x + i), vmean);
    acc = hn::MulAdd(d, d, acc);
  }
  double ss = reduce_sum(df, acc);
  for (; i < n; ++i) ss += double(x[i] - mean) * (x[i] - mean);
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  const VF vinv = hn::Set(df, inv);
  for (i = 0; i + L <= n; i += L) {
    VF v = hn::Mul(hn::Sub(hn::LoadU(df, x + i), vmean), vinv);
    if (w) v = hn::Mul(v, hn::LoadU(df, w + i));
    if (b) v = hn::Add(v, hn::LoadU(df, b + i));
    hn::StoreU(v, df, out + i);
  }
  for (; i < n; ++i) out[i] = (x[i] - mean) * inv * (w ? w[i] : 1.0f) + (b ? b[i] : 0.0f);
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(RmsNormRow);
HWY_EXPORT(LayerNormRow);

Status rms_norm(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kRmsNormX);
  const Tensor& out = g.output_tensor(n);
  const float eps = n.param<RmsNormParams>().eps;
  const int64_t rows = x.rows(), cols = x.cols();
  std::vector<float> wbuf;
  const float* w = nullptr;
  if (g.has_input(n, in::kRmsNormW)) {
    wbuf.resize(size_t(cols));
    w = load_row_f32(g.input_tensor(n, in::kRmsNormW), 0, wbuf.data());
  }
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, cols));
  pool.parallel_for(rows, grain, [&](int64_t r0, int64_t r1, int) {
    float* tmp = thread_scratch(0, cols);
    float* scratch = thread_scratch(1, cols);
    for (int64_t r = r0; r < r1; ++r) {
      float* res = out_row_f32(out, r, scratch);
      HWY_DYNAMIC_DISPATCH(RmsNormRow)(load_row_f32(x, r, tmp), w, eps, res, cols);
      finish_row_f32(out, r, res);
    }
  });
  return OkStatus();
}

Status layer_norm(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kLayerNormX);
  const Tensor& out = g.output_tensor(n);
  const float eps = n.param<LayerNormParams>().eps;
  const int64_t rows = x.rows(), cols = x.cols();
  std::vector<float> wbuf, bbuf;
  const float* w = nullptr;
  const float* b = nullptr;
  if (g.has_input(n, in::kLayerNormW)) {
    wbuf.resize(size_t(cols));
    w = load_row_f32(g.input_tensor(n, in::kLayerNormW), 0, wbuf.data());
  }
  if (g.has_input(n, in::kLayerNormB)) {
    bbuf.resize(size_t(cols));
    b = load_row_f32(g.input_tensor(n, in::kLayerNormB), 0, bbuf.data());
  }
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, cols));
  pool.parallel_for(rows, grain, [&](int64_t r0, int64_t r1, int) {
    float* tmp = thread_scratch(0, cols);
    float* scratch = thread_scratch(1, cols);
    for (int64_t r = r0; r < r1; ++r) {
      float* res = out_row_f32(out, r, scratch);
      HWY_DYNAMIC_DISPATCH(LayerNormRow)(load_row_f32(x, r, tmp), w, b, eps, res, cols);
      finish_row_f32(out, r, res);
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

// Rotary position embedding. The angles come from one table per call ([T, n_dims] cos and
// signed sin, computed in double like the reference, so large positions keep their precision),
// then each (token, head) row is rotated with SIMD.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/reference/reference.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/rope.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// out[j] = x[j] * C[j] + x[partner(j)] * S[j] for j < n_dims; partner is j^1 (normal) or
// j +- n_dims/2 (NeoX); the rest of the row passes through.
void RopeRow(RopeMode mode, const float* x, const float* C, const float* S, int64_t n_dims, int64_t D, float* out) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  int64_t j = 0;
  if (mode == RopeMode::kNeox) {
    const int64_t half = n_dims / 2;
    for (; j + L <= half; j += L) {
      const VF a = hn::LoadU(df, x + j), b = hn::LoadU(df, x + half + j);
      hn::StoreU(hn::MulAdd(a, hn::LoadU(df, C + j), hn::Mul(b, hn::LoadU(df, S + j))), df, out + j);
      hn::StoreU(hn::MulAdd(b, hn::LoadU(df, C + half + j), hn::Mul(a, hn::LoadU(df, S + half + j))), df,
                 out + half + j);
    }
    for (; j < half; ++j) {
      out[j] = x[j] * C[j] + x[half + j] * S[j];
      out[half + j] = x[half + j] * C[half + j] + x[j] * S[half + j];
    }
  } else {
#if HWY_TARGET != HWY_SCALAR
    // Shuffle2301 swaps adjacent lanes: exactly the (x[2i], x[2i+1]) pairs.
    for (; j + L <= n_dims; j += L) {
      const VF v = hn::LoadU(df, x + j);
      hn::StoreU(hn::MulAdd(v, hn::LoadU(df, C + j), hn::Mul(hn::Shuffle2301(v), hn::LoadU(df, S + j))), df, out + j);
    }
#endif
    for (; j < n_dims; ++j) out[j] = x[j] * C[j] + x[j ^ 1] * S[j];
  }
  for (j = n_dims; j < D; ++j) out[j] = x[j];
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(RopeRow);

namespace {
// Per-token cos and signed-sin table in the element layout RopeRow reads.
void rope_table(const RopeParams& p, const std::vector<float>& ff, int64_t pos, float* C, float* S) {
  const int half = p.n_dims / 2;
  for (int i0 = 0; i0 < p.n_dims; i0 += 2) {
    double c, s;
    ref::rope_cos_sin(p, pos, i0, ff.empty() ? 1.0f : ff[size_t(i0 / 2)], &c, &s);
    const int a = p.mode == RopeMode::kNormal ? i0 : i0 / 2;
    const int b = p.mode == RopeMode::kNormal ? i0 + 1 : i0 / 2 + half;
    C[a] = float(c);
    C[b] = float(c);
    S[a] = float(-s);
    S[b] = float(s);
  }
}
}  // namespace

Status rope(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kRopeX);
  const Tensor& pos = g.input_tensor(n, in::kRopePos);
  const Tensor& out = g.output_tensor(n);
  const auto& p = n.param<RopeParams>();
  std::vector<float> ff;
  if (g.has_input(n, in::kRopeFreqFactors)) {
    const Tensor& f = g.input_tensor(n, in::kRopeFreqFactors);
    ff.resize(size_t(f.cols()));
    const float* src = load_row_f32(f, 0, ff.data());
    if (src != ff.data()) std::copy(src, src + f.cols(), ff.begin());
  }
  const int64_t T = x.shape[0], H = x.shape[1], D = x.shape[2], nd = p.n_dims;
  std::vector<float> table(static_cast<size_t>(T * 2 * nd));
  // The table costs a pow/cos/sin per pair and token: split it over the threads too.
  pool.parallel_for(T, std::max<int64_t>(1, 4096 / nd), [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t)
      rope_table(p, ff, ref::load_i32(pos, t), &table[size_t(t * 2 * nd)], &table[size_t(t * 2 * nd + nd)]);
  });
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, D));
  pool.parallel_for(T * H, grain, [&](int64_t r0, int64_t r1, int) {
    float* tmp = thread_scratch(0, D);
    float* scratch = thread_scratch(1, D);
    for (int64_t r = r0; r < r1; ++r) {
      const float* C = &table[size_t((r / H) * 2 * nd)];
      float* res = out_row_f32(out, r, scratch);
      HWY_DYNAMIC_DISPATCH(RopeRow)(p.mode, load_row_f32(x, r, tmp), C, C + nd, nd, D, res);
      finish_row_f32(out, r, res);
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

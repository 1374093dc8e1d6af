// lora: the multi-LoRA delta over a base projection (core/op.h in::Lora). Rows split across the
// pool; each row finds its segment's slot, shrinks x through the slot's A (r dot products of
// length K) and expands through its B (N dot products of length r) into a copy of its base row.
// Adapter rows in f16/bf16 are converted per use (load_row_f32).
// NOTE: each row reads its adapter's A and B again; a segment's rows share them through the
// cache (rank 16 on SmolLM2: 36 KB of A, up to 98 KB of B). Blocking a segment's rows into one
// small GEMM per adapter (Punica's shrink/expand) is the next step for long prefills.
#include <algorithm>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/reference/reference.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/lora.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

float LoraDot(const float* a, const float* b, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, a + i + L), hn::LoadU(df, b + i + L), acc1);
  }
  for (; i + L <= n; i += L) acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
  float s = reduce_sum(df, hn::Add(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(LoraDot);

Status lora(ThreadPool& pool, const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(ref::check_lora_metadata(g, n));
  const Tensor& x = g.input_tensor(n, in::kLoraX);
  const Tensor& base = g.input_tensor(n, in::kLoraBase);
  const Tensor& A = g.input_tensor(n, in::kLoraA);
  const Tensor& B = g.input_tensor(n, in::kLoraB);
  const Tensor& ranks = g.input_tensor(n, in::kLoraRanks);
  const Tensor& scales = g.input_tensor(n, in::kLoraScales);
  const Tensor& ss = g.input_tensor(n, in::kLoraSegStart);
  const Tensor& sl = g.input_tensor(n, in::kLoraSegSlot);
  const Tensor& out = g.output_tensor(n);
  const int64_t T = x.shape[0], K = x.shape[1], N = base.shape[1], R = A.shape[1], G = sl.shape[0];
  const int64_t n_slots = ranks.shape[0];
  std::vector<int32_t> row_slot(size_t(T), -1);
  for (int64_t s = 0; s < G; ++s)
    std::fill(row_slot.begin() + ref::load_i32(ss, s), row_slot.begin() + ref::load_i32(ss, s + 1),
              ref::load_i32(sl, s));
  std::vector<float> scale(static_cast<size_t>(n_slots));
  if (const float* sp = load_row_f32(scales, 0, scale.data()); sp != scale.data())
    std::copy_n(sp, n_slots, scale.data());
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, R * (K + N)));
  pool.parallel_for(T, grain, [&](int64_t t0, int64_t t1, int) {
    float* xs = thread_scratch(0, K);
    float* as = thread_scratch(1, K);
    float* bs = thread_scratch(2, R);
    float* h = thread_scratch(3, R);
    float* ys = thread_scratch(4, N);
    float* bases = thread_scratch(5, N);
    for (int64_t t = t0; t < t1; ++t) {
      float* y = out_row_f32(out, t, ys);
      const float* b0 = load_row_f32(base, t, bases);
      if (b0 != y) std::copy_n(b0, N, y);
      const int32_t slot = row_slot[size_t(t)];
      const int64_t r = slot < 0 ? 0 : ref::load_i32(ranks, slot);
      if (r > 0) {
        const float* xr = load_row_f32(x, t, xs);
        for (int64_t j = 0; j < r; ++j)
          h[j] = HWY_DYNAMIC_DISPATCH(LoraDot)(load_row_f32(A, slot * R + j, as), xr, K) * scale[size_t(slot)];
        for (int64_t i = 0; i < N; ++i) y[i] += HWY_DYNAMIC_DISPATCH(LoraDot)(load_row_f32(B, slot * N + i, bs), h, r);
      }
      finish_row_f32(out, t, y);
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

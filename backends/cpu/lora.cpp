// lora: the multi-LoRA delta over a base projection (core/op.h in::Lora). The rows are grouped
// by adapter slot, wherever their segments lie (a decode step's sequences of one adapter are
// rarely adjacent), in groups of up to one vector's lanes; the pool runs the groups. A group
// shrinks its rows through the slot's A (each A row read once for the group: M dots of length K)
// and expands through B as a small GEMM: each B row's r values are broadcast against the
// group's r x M transposed shrunk rows, so one B row yields all M outputs with r FMAs and no
// horizontal sum (B [N, r] is row-major with r = 8..64, too short for dot products to pay).
// Rows without an adapter copy their base row. Adapter rows in f16/bf16 are converted per use
// (load_row_f32).
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

// ys[m][i] += sum_j B[i * ld + j] * ht[j * L + m] for i < N, j < r, m < M <= L (= Lanes): ht
// holds the group's shrunk rows transposed, each of its r rows zero-padded to L lanes.
void LoraExpand(const float* B, int64_t N, int64_t ld, int64_t r, const float* ht, int64_t M, float* const* ys) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  HWY_ALIGN float sums[hn::MaxLanes(DF())];
  for (int64_t i = 0; i < N; ++i) {
    const float* b = B + i * ld;
    VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
    int64_t j = 0;
    for (; j + 2 <= r; j += 2) {
      acc0 = hn::MulAdd(hn::Set(df, b[j]), hn::LoadU(df, ht + j * L), acc0);
      acc1 = hn::MulAdd(hn::Set(df, b[j + 1]), hn::LoadU(df, ht + (j + 1) * L), acc1);
    }
    if (j < r) acc0 = hn::MulAdd(hn::Set(df, b[j]), hn::LoadU(df, ht + j * L), acc0);
    hn::Store(hn::Add(acc0, acc1), df, sums);
    for (int64_t m = 0; m < M; ++m) ys[m][i] += sums[m];
  }
}

int64_t LoraLanes() { return int64_t(hn::Lanes(DF())); }

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(LoraDot);
HWY_EXPORT(LoraExpand);
HWY_EXPORT(LoraLanes);

namespace {

// Up to one vector's lanes of rows under one slot (-1: no adapter, the rows copy their base).
struct LoraGroup {
  int32_t slot;
  int32_t first, count;  // into the rows sorted by slot
};

struct LoraArgs {
  const Tensor &x, &base, &A, &B, &out;
  int64_t K, N, R;
};

// The group's rows: base copied into the output, then the delta of its slot added.
void run_group(const LoraArgs& a, const int32_t* rows, int32_t M, int32_t slot, int64_t r, float scale, int64_t L) {
  float* yscratch = thread_scratch(0, int64_t(M) * a.N);
  float* bases = thread_scratch(1, a.N);
  float* ys[64];
  for (int32_t m = 0; m < M; ++m) {
    ys[m] = out_row_f32(a.out, rows[m], yscratch + int64_t(m) * a.N);
    const float* b0 = load_row_f32(a.base, rows[m], bases);
    if (b0 != ys[m]) std::copy_n(b0, a.N, ys[m]);
  }
  if (r > 0) {
    float* xs = thread_scratch(2, int64_t(M) * a.K);
    const float* xr[64];
    for (int32_t m = 0; m < M; ++m) xr[m] = load_row_f32(a.x, rows[m], xs + int64_t(m) * a.K);
    float* as = thread_scratch(3, a.K);
    float* ht = thread_scratch(4, r * L);
    std::fill_n(ht, r * L, 0.0f);
    for (int64_t j = 0; j < r; ++j) {
      const float* arow = load_row_f32(a.A, slot * a.R + j, as);
      for (int32_t m = 0; m < M; ++m) ht[j * L + m] = HWY_DYNAMIC_DISPATCH(LoraDot)(arow, xr[m], a.K) * scale;
    }
    const float* B =
        a.B.dtype == DType::kF32 && a.B.is_contiguous() ? static_cast<const float*>(a.B.host_data()) : nullptr;
    if (B) {
      HWY_DYNAMIC_DISPATCH(LoraExpand)(B + slot * a.N * a.R, a.N, a.R, r, ht, M, ys);
    } else {  // f16/bf16 or strided B: its rows one at a time, converted
      float* bs = thread_scratch(5, a.R);
      for (int64_t i = 0; i < a.N; ++i) {
        const float* brow = load_row_f32(a.B, slot * a.N + i, bs);
        float col[64];
        std::fill_n(col, M, 0.0f);
        for (int64_t j = 0; j < r; ++j)
          for (int32_t m = 0; m < M; ++m) col[m] += brow[j] * ht[j * L + m];
        for (int32_t m = 0; m < M; ++m) ys[m][i] += col[m];
      }
    }
  }
  for (int32_t m = 0; m < M; ++m) finish_row_f32(a.out, rows[m], ys[m]);
}

}  // namespace

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
  // Rows sorted by slot (stable), cut into groups of at most L rows of one slot.
  const int64_t L = std::min<int64_t>(HWY_DYNAMIC_DISPATCH(LoraLanes)(), 64);
  std::vector<int32_t> rows(static_cast<size_t>(T));
  for (int32_t t = 0; t < int32_t(T); ++t) rows[size_t(t)] = t;
  std::stable_sort(rows.begin(), rows.end(),
                   [&](int32_t a, int32_t b) { return row_slot[size_t(a)] < row_slot[size_t(b)]; });
  std::vector<LoraGroup> groups;
  for (int32_t i = 0; i < int32_t(T);) {
    const int32_t slot = row_slot[size_t(rows[size_t(i)])];
    int32_t j = i;
    while (j < int32_t(T) && j - i < L && row_slot[size_t(rows[size_t(j)])] == slot) ++j;
    groups.push_back({slot, i, j - i});
    i = j;
  }
  const LoraArgs args{x, base, A, B, out, K, N, R};
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, L * R * (K + N)));
  pool.parallel_for(int64_t(groups.size()), grain, [&](int64_t g0, int64_t g1, int) {
    for (int64_t gi = g0; gi < g1; ++gi) {
      const LoraGroup& grp = groups[size_t(gi)];
      const int64_t r = grp.slot < 0 ? 0 : ref::load_i32(ranks, grp.slot);
      run_group(args, rows.data() + grp.first, grp.count, grp.slot, r, grp.slot < 0 ? 0.0f : scale[size_t(grp.slot)],
                L);
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

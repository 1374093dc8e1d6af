// lora: the multi-LoRA delta over a base projection (core/op.h in::Lora). The rows are grouped
// by adapter slot, wherever their segments lie (a decode step's sequences of one adapter are
// rarely adjacent), in groups of up to 16 rows. First each group shrinks its rows through the
// slot's A (each A row read once for the group: M dots of length K), in parallel over groups;
// then the expand adds, for each of the r rank rows of B ([R, N]), coef x that row to each of the
// group's output rows: vector FMAs along N, in parallel over (group, column range), so even one
// decode row's expand spreads over the pool. Rows without an adapter copy their base row.
// Adapter rows in f16/bf16 are converted per use (load_row_f32).
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

// y[i] += c * b[i] for i < n.
void LoraAxpy(float c, const float* b, float* y, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  const VF vc = hn::Set(df, c);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::MulAdd(vc, hn::LoadU(df, b + i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] += c * b[i];
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(LoraDot);
HWY_EXPORT(LoraAxpy);

namespace {

constexpr int32_t kGroupRows = 16;  // rows of one slot shrunk and expanded together

// Up to kGroupRows rows under one slot (-1: no adapter, the rows copy their base).
struct LoraGroup {
  int32_t slot;
  int32_t first, count;  // into the rows sorted by slot
  int32_t h;             // the group's first row of the shrunk [rows, R] buffer
};

struct LoraArgs {
  const Tensor &x, &base, &A, &B, &out;
  int64_t K, N, R;
};

// h[m * R + j] = scale * A_slot[j] . x[rows[m]] for j < r.
void shrink_group(const LoraArgs& a, const int32_t* rows, int32_t M, int32_t slot, int64_t r, float scale, float* h) {
  float* xs = thread_scratch(0, int64_t(M) * a.K);
  const float* xr[kGroupRows];
  for (int32_t m = 0; m < M; ++m) xr[m] = load_row_f32(a.x, rows[m], xs + int64_t(m) * a.K);
  float* as = thread_scratch(1, a.K);
  for (int64_t j = 0; j < r; ++j) {
    const float* arow = load_row_f32(a.A, slot * a.R + j, as);
    for (int32_t m = 0; m < M; ++m) h[int64_t(m) * a.R + j] = HWY_DYNAMIC_DISPATCH(LoraDot)(arow, xr[m], a.K) * scale;
  }
}

// Columns [i0, i1) of the group's output rows: base, plus sum_j h[m][j] B_slot[j] for j < r.
void expand_group(const LoraArgs& a, const int32_t* rows, int32_t M, int32_t slot, int64_t r, const float* h,
                  int64_t i0, int64_t i1) {
  const int64_t w = i1 - i0;
  float* ys = thread_scratch(2, int64_t(M) * w);
  float* bases = thread_scratch(3, a.N);
  float* outs = thread_scratch(4, a.N);
  for (int32_t m = 0; m < M; ++m) std::copy_n(load_row_f32(a.base, rows[m], bases) + i0, w, ys + int64_t(m) * w);
  const bool dense_b = a.B.dtype == DType::kF32 && a.B.is_contiguous();
  float* bs = thread_scratch(5, a.N);
  for (int64_t j = 0; j < r; ++j) {
    const float* brow = dense_b ? static_cast<const float*>(a.B.host_data()) + (slot * a.R + j) * a.N
                                : load_row_f32(a.B, slot * a.R + j, bs);
    for (int32_t m = 0; m < M; ++m)
      HWY_DYNAMIC_DISPATCH(LoraAxpy)(h[int64_t(m) * a.R + j], brow + i0, ys + int64_t(m) * w, w);
  }
  for (int32_t m = 0; m < M; ++m) {
    if (w == a.N) {
      float* y = out_row_f32(a.out, rows[m], outs);
      std::copy_n(ys + int64_t(m) * w, w, y);
      finish_row_f32(a.out, rows[m], y);
    } else {  // a column range: only of a dense f32 output (lora() splits no other), written in place
      std::copy_n(ys + int64_t(m) * w, w, out_row_f32(a.out, rows[m], outs) + i0);
    }
  }
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
  // Rows sorted by slot (stable), cut into groups of at most kGroupRows rows of one slot.
  std::vector<int32_t> rows(static_cast<size_t>(T));
  for (int32_t t = 0; t < int32_t(T); ++t) rows[size_t(t)] = t;
  std::stable_sort(rows.begin(), rows.end(),
                   [&](int32_t a, int32_t b) { return row_slot[size_t(a)] < row_slot[size_t(b)]; });
  std::vector<LoraGroup> groups;
  int32_t h_rows = 0;
  for (int32_t i = 0; i < int32_t(T);) {
    const int32_t slot = row_slot[size_t(rows[size_t(i)])];
    int32_t j = i;
    while (j < int32_t(T) && j - i < kGroupRows && row_slot[size_t(rows[size_t(j)])] == slot) ++j;
    groups.push_back({slot, i, j - i, h_rows});
    if (slot >= 0) h_rows += j - i;
    i = j;
  }
  if (groups.empty()) return OkStatus();
  const LoraArgs args{x, base, A, B, out, K, N, R};
  auto rank_of = [&](const LoraGroup& grp) {
    return grp.slot < 0 ? int64_t(0) : int64_t(ref::load_i32(ranks, grp.slot));
  };
  std::vector<float> h(size_t(std::max(h_rows, 1)) * size_t(R), 0.0f);
  pool.parallel_for(int64_t(groups.size()), 1, [&](int64_t g0, int64_t g1, int) {
    for (int64_t gi = g0; gi < g1; ++gi) {
      const LoraGroup& grp = groups[size_t(gi)];
      if (const int64_t r = rank_of(grp); r > 0)
        shrink_group(args, rows.data() + grp.first, grp.count, grp.slot, r, scale[size_t(grp.slot)],
                     h.data() + int64_t(grp.h) * R);
    }
  });
  // Column ranges: enough items for the pool even when one group is the whole step (a decode).
  const int64_t n_items_min = 2 * int64_t(pool.size());
  const bool dense_out = out.dtype == DType::kF32 && last_dim_dense(out);
  const int64_t split = dense_out
                            ? std::clamp<int64_t>((n_items_min + int64_t(groups.size()) - 1) / int64_t(groups.size()),
                                                  1, std::max<int64_t>(1, N / 64))
                            : 1;
  const int64_t chunk = (N + split - 1) / split;
  pool.parallel_for(int64_t(groups.size()) * split, 1, [&](int64_t w0, int64_t w1, int) {
    for (int64_t w = w0; w < w1; ++w) {
      const LoraGroup& grp = groups[size_t(w / split)];
      const int64_t i0 = (w % split) * chunk, i1 = std::min(N, i0 + chunk);
      if (i0 < i1)
        expand_group(args, rows.data() + grp.first, grp.count, grp.slot, rank_of(grp), h.data() + int64_t(grp.h) * R,
                     i0, i1);
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

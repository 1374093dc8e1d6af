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

// a . b for a in dtype T (an adapter row, read in place) and b f32.
template <DType T>
float LoraDotT(const void* a, const float* b, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  constexpr size_t es = T == DType::kF32 ? 4 : 2;
  const char* ap = static_cast<const char*>(a);
  VF acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    acc0 = hn::MulAdd(load_as_f32<T>(df, ap + size_t(i) * es), hn::LoadU(df, b + i), acc0);
    acc1 = hn::MulAdd(load_as_f32<T>(df, ap + size_t(i + L) * es), hn::LoadU(df, b + i + L), acc1);
  }
  for (; i + L <= n; i += L) acc0 = hn::MulAdd(load_as_f32<T>(df, ap + size_t(i) * es), hn::LoadU(df, b + i), acc0);
  float s = reduce_sum(df, hn::Add(acc0, acc1));
  for (; i < n; ++i) s += scalar_as_f32<T>(ap + size_t(i) * es) * b[i];
  return s;
}
float LoraDot(const void* a, const float* b, int64_t n) { return LoraDotT<DType::kF32>(a, b, n); }
float LoraDotF16(const void* a, const float* b, int64_t n) { return LoraDotT<DType::kF16>(a, b, n); }
float LoraDotBF16(const void* a, const float* b, int64_t n) { return LoraDotT<DType::kBF16>(a, b, n); }

// y[i] += c * b[i] for i < n, b in dtype T (f32, f16 or bf16: adapters keep their precision).
template <DType T>
void LoraAxpyT(float c, const void* b, float* y, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  constexpr size_t es = T == DType::kF32 ? 4 : 2;
  const char* bp = static_cast<const char*>(b);
  const VF vc = hn::Set(df, c);
  int64_t i = 0;
  for (; i + L <= n; i += L)
    hn::StoreU(hn::MulAdd(vc, load_as_f32<T>(df, bp + size_t(i) * es), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] += c * scalar_as_f32<T>(bp + size_t(i) * es);
}
void LoraAxpy(float c, const void* b, float* y, int64_t n) { LoraAxpyT<DType::kF32>(c, b, y, n); }
void LoraAxpyF16(float c, const void* b, float* y, int64_t n) { LoraAxpyT<DType::kF16>(c, b, y, n); }
void LoraAxpyBF16(float c, const void* b, float* y, int64_t n) { LoraAxpyT<DType::kBF16>(c, b, y, n); }

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(LoraDot);
HWY_EXPORT(LoraDotF16);
HWY_EXPORT(LoraDotBF16);
HWY_EXPORT(LoraAxpy);
HWY_EXPORT(LoraAxpyF16);
HWY_EXPORT(LoraAxpyBF16);

namespace {

constexpr int32_t kGroupRows = 16;  // rows of one slot shrunk and expanded together

// Up to kGroupRows rows under one slot (-1: no adapter, the rows copy their base).
struct LoraGroup {
  int32_t slot;
  int32_t first, count;  // into the rows sorted by slot
};

// Multiply-adds of a step's deltas below which the op runs on the calling thread (a decode row
// of SmolLM2 at rank 16: 16 x (576 + 576), microseconds, less than waking the pool).
constexpr int64_t kLoraParallelWork = int64_t(1) << 16;

struct LoraArgs {
  const Tensor &x, &base, &A, &B, &out;
  int64_t K, N, R;
};

// h[m * R + j] = scale * A_slot[j] . x[rows[m]] for j < r.
void shrink_group(const LoraArgs& a, const int32_t* rows, int32_t M, int32_t slot, int64_t r, float scale, float* h) {
  float* xs = thread_scratch(0, int64_t(M) * a.K);
  const float* xr[kGroupRows];
  for (int32_t m = 0; m < M; ++m) xr[m] = load_row_f32(a.x, rows[m], xs + int64_t(m) * a.K);
  // A's rows read in place, in their own dtype, when A is contiguous (the LoraSet's always is).
  const bool dense_a = a.A.is_contiguous();
  const DType at = dense_a ? a.A.dtype : DType::kF32;
  auto dot = [at](const void* p, const float* x, int64_t n) {
    if (at == DType::kF16) return HWY_DYNAMIC_DISPATCH(LoraDotF16)(p, x, n);
    if (at == DType::kBF16) return HWY_DYNAMIC_DISPATCH(LoraDotBF16)(p, x, n);
    return HWY_DYNAMIC_DISPATCH(LoraDot)(p, x, n);
  };
  const size_t es = at == DType::kF32 ? 4 : 2;
  float* as = thread_scratch(1, a.K);
  for (int64_t j = 0; j < r; ++j) {
    const void* arow =
        dense_a
            ? static_cast<const void*>(static_cast<const char*>(a.A.host_data()) + size_t((slot * a.R + j) * a.K) * es)
            : load_row_f32(a.A, slot * a.R + j, as);
    for (int32_t m = 0; m < M; ++m) h[int64_t(m) * a.R + j] = dot(arow, xr[m], a.K) * scale;
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
  // B's rows read in place, in their own dtype, when B is contiguous (the LoraSet's always is).
  const bool dense_b = a.B.is_contiguous();
  const DType bt = dense_b ? a.B.dtype : DType::kF32;
  auto axpy = [bt](float c, const void* b, float* y, int64_t n) {
    if (bt == DType::kF16) HWY_DYNAMIC_DISPATCH(LoraAxpyF16)(c, b, y, n);
    else if (bt == DType::kBF16) HWY_DYNAMIC_DISPATCH(LoraAxpyBF16)(c, b, y, n);
    else HWY_DYNAMIC_DISPATCH(LoraAxpy)(c, b, y, n);
  };
  const size_t es = bt == DType::kF32 ? 4 : 2;
  float* bs = thread_scratch(5, a.N);
  for (int64_t j = 0; j < r; ++j) {
    const char* brow = dense_b ? static_cast<const char*>(a.B.host_data()) + size_t((slot * a.R + j) * a.N) * es
                               : reinterpret_cast<const char*>(load_row_f32(a.B, slot * a.R + j, bs));
    for (int32_t m = 0; m < M; ++m) axpy(h[int64_t(m) * a.R + j], brow + size_t(i0) * es, ys + int64_t(m) * w, w);
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
  for (int32_t i = 0; i < int32_t(T);) {
    const int32_t slot = row_slot[size_t(rows[size_t(i)])];
    int32_t j = i;
    while (j < int32_t(T) && j - i < kGroupRows && row_slot[size_t(rows[size_t(j)])] == slot) ++j;
    groups.push_back({slot, i, j - i});
    i = j;
  }
  if (groups.empty()) return OkStatus();
  const LoraArgs args{x, base, A, B, out, K, N, R};
  auto rank_of = [&](const LoraGroup& grp) {
    return grp.slot < 0 ? int64_t(0) : int64_t(ref::load_i32(ranks, grp.slot));
  };
  // One pass over (group, column range) items, each shrinking its group's rows itself (r dots of
  // length K per row, cheap beside a second wake of the pool, which the ~200 lora ops of a decode
  // step would each pay). A step with little delta work runs on the calling thread; otherwise
  // the columns are split until there are items for every thread, even for one decode row.
  int64_t work = 0;
  for (const LoraGroup& grp : groups) work += int64_t(grp.count) * rank_of(grp) * (K + N);
  const bool parallel = work >= kLoraParallelWork;
  const bool dense_out = out.dtype == DType::kF32 && last_dim_dense(out);
  const int64_t n_groups = int64_t(groups.size());
  const int64_t split =
      parallel && dense_out
          ? std::clamp<int64_t>((2 * int64_t(pool.size()) + n_groups - 1) / n_groups, 1, std::max<int64_t>(1, N / 64))
          : 1;
  const int64_t chunk = (N + split - 1) / split, n_items = n_groups * split;
  pool.parallel_for(n_items, parallel ? 1 : n_items, [&](int64_t w0, int64_t w1, int) {
    float* h = thread_scratch(6, kGroupRows * R);
    int64_t shrunk = -1;  // the group whose rows h holds
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t gi = w / split;
      const LoraGroup& grp = groups[size_t(gi)];
      const int64_t r = rank_of(grp), i0 = (w % split) * chunk, i1 = std::min(N, i0 + chunk);
      if (r > 0 && shrunk != gi) {
        shrink_group(args, rows.data() + grp.first, grp.count, grp.slot, r, scale[size_t(grp.slot)], h);
        shrunk = gi;
      }
      if (i0 < i1) expand_group(args, rows.data() + grp.first, grp.count, grp.slot, r, h, i0, i1);
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

// matmul: out = x @ w^T (+ bias) for f32/f16/bf16 activations and weights of every format.
// Float and FP8 weights: SIMD dot products in f32 (weights converted on the fly, each weight
// row read once per group of 4 activation rows). Block formats: activations quantised to int8
// per 32-block (matmul_q8.cpp, matmul_kq.cpp), or, for 64+ rows on a CPU with AMX when enabled
// (TESSERA_CPU_AMX=1), bf16 through the tile unit (matmul_amx.cpp). Large f32 GEMMs (prefill) go to oneDNN when it is available.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_amx.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

// res[r] = dot(x[r], w) over K for R activation rows; U vectors in flight per row.
// NOTE: the constant R/U loops must be unrolled (GCC -O2 keeps them rolled and spills the
// accumulators to memory, 3x slower): hence the pragmas.
template <DType T, int R, int U>
HWY_INLINE void dot_rows(const float* const* x, const char* w, int64_t K, float* res) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  constexpr int64_t eb = elem_bytes<T>();
  VF acc[R][U];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) acc[r][u] = hn::Zero(df);
  int64_t k = 0;
  for (; k + U * L <= K; k += U * L) {
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) {
      const VF wv = load_as_f32<T>(df, w + (k + u * L) * eb);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][u] = hn::MulAdd(hn::LoadU(df, x[r] + k + u * L), wv, acc[r][u]);
    }
  }
  for (; k + L <= K; k += L) {
    const VF wv = load_as_f32<T>(df, w + k * eb);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r][0] = hn::MulAdd(hn::LoadU(df, x[r] + k), wv, acc[r][0]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int u = 1; u < U; ++u) acc[r][0] = hn::Add(acc[r][0], acc[r][u]);
    res[r] = reduce_sum(df, acc[r][0]);
  }
  for (; k < K; ++k) {
    const float wv = scalar_as_f32<T>(w + k * eb);
    for (int r = 0; r < R; ++r) res[r] += x[r][k] * wv;
  }
}

// FP8 E4M3 decode GEMV. The generic path widens 8 codes per step through f16 (load, shift,
// mask, a 2-uop f16 -> f32 convert: ~6 instructions per 8 weights with the FMA); here the sign-
// extended code shifted into an f32 and masked reads 2^-120 times the E4M3 value (subnormals
// included, as denormal f32; the E4M3FN NaN code reads as 480 like the generic path): 4
// instructions per 8 weights. The 2^-120 is split between the activations (x 2^60, once per
// call) and the result (x 2^60), so neither the products nor the sums leave the normal range.
// NOTE: a host thread running with denormals-are-zero (MXCSR.DAZ) would read E4M3 subnormals
// (below 2^-6 of the row scale's unit) as 0 here; Tessera never sets it.
inline constexpr float kTwo60 = 1152921504606846976.0f;  // 2^60
inline constexpr float kTwoM112 = pow2_exact(-112);
HWY_INLINE VF e4m3_scaled(DF df, const int8_t* p) {
  const hn::Rebind<int8_t, DF> di8;
  const hn::RebindToSigned<DF> di32;
  const auto v = hn::ShiftLeft<20>(hn::PromoteTo(di32, hn::LoadU(di8, p)));
  return hn::BitCast(df, hn::And(v, hn::Set(di32, int32_t(0x87f00000u))));
}
void e4m3_gemv(const float* x, const char* wbase, int64_t ldw, int64_t n0, int64_t n1, int64_t K, float* out) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  float* xs = thread_scratch(6, K);
  int64_t k = 0;
  for (; k + L <= K; k += L) hn::StoreU(hn::Mul(hn::LoadU(df, x + k), hn::Set(df, kTwo60)), df, xs + k);
  for (; k < K; ++k) xs[k] = x[k] * kTwo60;
  const int64_t ahead_rows = std::max<int64_t>(1, kGemvPrefetchBytes / ldw);
  for (int64_t n = n0; n < n1; ++n) {
    if (n + ahead_rows < n1)
      for (int64_t o = 0; o < ldw; o += 64) hwy::Prefetch(wbase + (n + ahead_rows) * ldw + o);
    const char* row = wbase + n * ldw;
    const auto* w = reinterpret_cast<const int8_t*>(row + row_header_bytes<DType::kFP8_E4M3>());
    VF acc[4] = {hn::Zero(df), hn::Zero(df), hn::Zero(df), hn::Zero(df)};
    k = 0;
    for (; k + 4 * L <= K; k += 4 * L) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) acc[u] = hn::MulAdd(hn::LoadU(df, xs + k + u * L), e4m3_scaled(df, w + k + u * L), acc[u]);
    }
    for (; k + L <= K; k += L) acc[0] = hn::MulAdd(hn::LoadU(df, xs + k), e4m3_scaled(df, w + k), acc[0]);
    float sum = reduce_sum(df, hn::Add(hn::Add(acc[0], acc[1]), hn::Add(acc[2], acc[3])));
    // The tail: scalar_as_f32 reads 2^-8 of the value, the loop's units are 2^-120.
    for (; k < K; ++k) sum += xs[k] * scalar_as_f32<DType::kFP8_E4M3>(w + k) * kTwoM112;
    float s;
    std::memcpy(&s, row, 4);
    out[n] = sum * kTwo60 * s;
  }
}

template <DType T>
void tile(const float* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw, int64_t n0, int64_t n1,
          int64_t K, float* out, int64_t ldo) {
  constexpr int R = 4;
  if constexpr (T == DType::kFP8_E4M3) {
    if (m1 - m0 == 1) return e4m3_gemv(x + m0 * ldx, wbase, ldw, n0, n1, K, out + m0 * ldo);
  }
  constexpr int64_t kHeader = row_header_bytes<T>();
  for (int64_t n = n0; n < n1; ++n) {
    const char* w = wbase + n * ldw + kHeader;
    const float rs = row_scale<T>(wbase + n * ldw);
    int64_t m = m0;
    for (; m + R <= m1; m += R) {
      const float* xr[R] = {x + m * ldx, x + (m + 1) * ldx, x + (m + 2) * ldx, x + (m + 3) * ldx};
      float res[R];
      dot_rows<T, R, 2>(xr, w, K, res);
      for (int r = 0; r < R; ++r) out[(m + r) * ldo + n] = res[r] * rs;
    }
    for (; m < m1; ++m) {
      const float* xr[1] = {x + m * ldx};
      float res;
      dot_rows<T, 1, 4>(xr, w, K, &res);
      out[m * ldo + n] = res * rs;
    }
  }
}

void GemmFloatTile(DType w, const float* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                   int64_t n0, int64_t n1, int64_t K, float* out, int64_t ldo) {
  switch (w) {
    case DType::kF16: return tile<DType::kF16>(x, ldx, m0, m1, wbase, ldw, n0, n1, K, out, ldo);
    case DType::kBF16: return tile<DType::kBF16>(x, ldx, m0, m1, wbase, ldw, n0, n1, K, out, ldo);
    case DType::kFP8_E4M3: return tile<DType::kFP8_E4M3>(x, ldx, m0, m1, wbase, ldw, n0, n1, K, out, ldo);
    case DType::kFP8_E5M2: return tile<DType::kFP8_E5M2>(x, ldx, m0, m1, wbase, ldw, n0, n1, K, out, ldo);
    default: return tile<DType::kF32>(x, ldx, m0, m1, wbase, ldw, n0, n1, K, out, ldo);
  }
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#ifdef TESSERA_HAVE_DNNL
#include "backends/cpu/onednn.h"
#endif

namespace tessera::cpu {

HWY_EXPORT(GemmFloatTile);

void gemm_float_tile(DType w, const float* x, int64_t ldx, int64_t m0, int64_t m1, const char* wbase, int64_t ldw,
                     int64_t n0, int64_t n1, int64_t K, float* out, int64_t ldo) {
  HWY_DYNAMIC_DISPATCH(GemmFloatTile)(w, x, ldx, m0, m1, wbase, ldw, n0, n1, K, out, ldo);
}

void pack_activations(ThreadPool& pool, const Tensor& x, const int64_t* rows, int64_t M, DType w, PackedAct* out) {
  const int64_t K = x.cols();
  out->M = M;
  out->K = K;
  out->quantized = uses_act_q8(w);
  if (out->quantized) {
    if (out->q8.size() < size_t(M * (K / 32))) out->q8.resize(size_t(M * (K / 32)));
  } else {
    if (out->f32.size() < size_t(M * K)) out->f32.resize(size_t(M * K));
  }
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, K));
  pool.parallel_for(M, grain, [&](int64_t m0, int64_t m1, int) {
    float* tmp = thread_scratch(0, K);
    for (int64_t m = m0; m < m1; ++m) {
      const int64_t src_row = rows ? rows[m] : m;
      if (out->quantized) {
        quantize_act_q8(load_row_f32(x, src_row, tmp), &out->q8[size_t(m * (K / 32))], K);
      } else {
        float* dst = &out->f32[size_t(m * K)];
        const float* src = load_row_f32(x, src_row, dst);
        if (src != dst) std::memcpy(dst, src, size_t(K) * 4);
      }
    }
  });
}

namespace {
// Rows of weights one thread handles per work unit: enough to amortise the dispatch, few
// enough that N splits evenly over the threads.
int64_t n_grain(int64_t N, int threads) { return std::clamp<int64_t>(N / (threads * 8), 1, 64); }
}  // namespace

void gemm(ThreadPool& pool, const PackedAct& act, const WeightMat& w, float* out, int64_t ldo) {
  const int64_t M = act.M, N = w.N, K = w.K;
#ifdef TESSERA_HAVE_DNNL
  if (onednn_gemm(act, w, out, ldo)) return;
#endif
  auto run_tile = [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (act.quantized)
      gemm_q8_tile(w.dtype, act.q8.data(), K / 32, m0, m1, w.base, w.row_stride, n0, n1, K / 32, out, ldo);
    else
      gemm_float_tile(w.dtype, act.f32.data(), K, m0, m1, w.base, w.row_stride, n0, n1, K, out, ldo);
  };
  // Few rows (decode): each thread streams its own contiguous range of weight rows once. (Not
  // parallel_for_stealing as the tiled GEMV: each call re-prepares the activations and its row
  // prefetch stops at the range's end, so chunking these kernels needs its own measurement.)
  constexpr int64_t kMTile = 32;
  if (M <= kMTile) {
    pool.parallel_for(N, n_grain(N, pool.size()), [&](int64_t n0, int64_t n1, int) { run_tile(0, M, n0, n1); });
    return;
  }
  // Many rows (prefill): M x N tiles, a weight tile reused by kMTile activation rows.
  const int64_t nt = 64, mtiles = (M + kMTile - 1) / kMTile, ntiles = (N + nt - 1) / nt;
  pool.parallel_for(mtiles * ntiles, 1, [&](int64_t u0, int64_t u1, int) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t nb = u % ntiles, mb = u / ntiles;
      run_tile(mb * kMTile, std::min(M, (mb + 1) * kMTile), nb * nt, std::min(N, (nb + 1) * nt));
    }
  });
}

namespace {
// A weight whose rows are not dense (a transposed view) is first copied into dense f32.
WeightMat weight_view(const Tensor& w, std::vector<float>* dense) {
  WeightMat m{w.dtype, static_cast<const char*>(w.host_data()), w.stride[0], dtype_traits(w.dtype).block_bytes,
              w.shape[0], w.shape[1]};
  if (last_dim_dense(w)) return m;
  dense->resize(size_t(m.N * m.K));
  for (int64_t r = 0; r < m.N; ++r) {
    float* dst = dense->data() + r * m.K;
    const float* src = load_row_f32(w, r, dst);
    if (src != dst) std::memcpy(dst, src, size_t(m.K) * 4);
  }
  return {DType::kF32, reinterpret_cast<const char*>(dense->data()), m.K * 4, 4, m.N, m.K};
}
}  // namespace

namespace {
// The previous matmul's packed activations on this thread: which graph value of which run.
struct PackedKey {
  const Graph* graph = nullptr;
  ValueId x = kNoValue;
  bool quantized = false;
  int64_t M = 0, K = 0;
  bool operator==(const PackedKey&) const = default;
};
thread_local PackedKey packed_key;
}  // namespace

void begin_graph_run() { packed_key = PackedKey{}; }

Status matmul(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kMatmulX);
  const Tensor& wt = g.input_tensor(n, in::kMatmulW);
  const Tensor& out = g.output_tensor(n);
  const int64_t M = x.rows(), N = wt.shape[0];
  std::vector<float> dense;
  const bool tiled = wt.layout == WeightLayout::kCpuTile16;
  const WeightMat w = tiled ? WeightMat{wt.dtype, static_cast<const char*>(wt.host_data()), 0, 0, N, wt.shape[1]}
                            : weight_view(wt, &dense);
  // Prefill on AMX where the CPU has it and it is enabled (bf16 activations, weights decoded to
  // bf16 per panel; off by default: matmul_amx.h).
  const bool amx = M >= amx_min_rows(tiled) && dtype_traits(w.dtype).is_quantized && amx_usable() &&
                   amx_supports(w.dtype, tiled, N, w.K);
  thread_local PackedAct act;  // grow-only buffers, reused by every matmul on this thread
  if (!amx) {
    const PackedKey key{&g, n.inputs[size_t(in::kMatmulX)], uses_act_q8(w.dtype), M, w.K};
    if (!(key == packed_key)) {
      packed_key = PackedKey{};  // an error or exception midway leaves no stale key
      pack_activations(pool, x, nullptr, M, w.dtype, &act);
      packed_key = key;
    }
  }
  // Write straight into a contiguous f32 output; otherwise through a scratch and a conversion.
  const bool direct = out.dtype == DType::kF32 && out.is_contiguous();
  std::vector<float> tmp;
  float* y = static_cast<float*>(out.host_data());
  if (!direct) {
    tmp.resize(size_t(M * N));
    y = tmp.data();
  }
  if (amx)
    gemm_amx(pool, x, M, w.dtype, w.base, w.row_stride, tiled, N, w.K, y, N);
  else if (tiled)
    gemm_tiled(pool, act, w.dtype, w.base, N, y, N);
  else
    gemm(pool, act, w, y, N);
  std::vector<float> bias;
  if (g.has_input(n, in::kMatmulBias)) {
    bias.resize(size_t(N));
    const float* b = load_row_f32(g.input_tensor(n, in::kMatmulBias), 0, bias.data());
    if (b != bias.data()) std::memcpy(bias.data(), b, size_t(N) * 4);
  }
  if (!bias.empty() || !direct) {
    for (int64_t m = 0; m < M; ++m) {
      float* row = y + m * N;
      for (int64_t j = 0; j < int64_t(bias.size()); ++j) row[j] += bias[size_t(j)];
      if (!direct) store_row_f32(out, m, row);
    }
  }
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

// ssm_conv and gated_delta_net: the recurrent layers of hybrid models (core/op.h). Each sequence
// reads its state row, runs its rows in order and writes the row back; sequences run in parallel
// with channel chunks (conv) or value heads (delta rule).
//
// The delta rule has two forms. Token by token (decode, and short runs such as speculative
// verification): one pass over the [Dk, Dv] state decays it and reads it at k, a second writes
// k u^T and reads it at q. Chunked (prefill): the run is cut into chunks of kGdnChunk tokens;
// within a chunk the state's contributions become matrix products and the intra-chunk delta rule
// a unit lower-triangular system, solved as its [C, C] inverse times the right-hand side (the
// WY/UT form of the Gated DeltaNet paper, as FLA and llama.cpp use). With g the chunk's
// cumulative log-decay (gamma_t = exp(g_t)) and S0 the state before it:
//   U = (I + A)^-1 diag(beta) (V - diag(gamma) K S0),  A[t,s] = beta_t exp(g_t - g_s) k_t.k_s  (s < t)
//   O = diag(gamma) Q S0 + P U,                      P[t,s] = exp(g_t - g_s) q_t.k_s      (s <= t)
//   S = gamma_C S0 + (K diag(exp(g_C - g)))^T U
// Every exponent is <= 0, so nothing overflows. Each run is cut into chunks from its first token;
// a chunk of at least TESSERA_CPU_GDN_CHUNKED=N tokens takes the chunked form (default
// kGdnChunkedMin; 0: token by token always, for the bench), shorter ones (decodes, a run's tail)
// the token form.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/reference/reference.h"

#ifndef TESSERA_CPU_GDN_CHUNK_
#define TESSERA_CPU_GDN_CHUNK_
namespace tessera::cpu {
// One chunk of one (sequence, value head): n <= kGdnChunk tokens, f32, rows contiguous.
struct GdnChunk {
  float* S;           // [Dk, Dv] state, rows s_stride floats apart; updated in place
  int64_t s_stride;
  const float* q;     // [n, Dk] l2-normalised and scaled
  const float* k;     // [n, Dk] l2-normalised
  const float* v;     // [n, Dv]
  const float* g;     // [n] log-decay per token
  const float* beta;  // [n] sigmoid(beta)
  float* o;           // [n, Dv]
  int64_t n, Dk, Dv;
  float* scratch;     // gdn_scratch_floats(Dk, Dv)
};
inline constexpr int64_t kGdnChunk = 64;
inline constexpr int64_t kGdnChunkedMin = 12;  // the crossover measured in docs/results/2026-12-07-chunked-gated-delta-net.md
// K^T and K^T scaled [Dk, C] each, K S0, Q S0 and U [C, Dv] each, K K^T and Q K^T [C, C] each,
// g and a row of exponentials [C] each.
inline int64_t gdn_scratch_floats(int64_t Dk, int64_t Dv) {
  return 2 * Dk * kGdnChunk + 3 * kGdnChunk * Dv + 2 * kGdnChunk * kGdnChunk + 2 * kGdnChunk;
}

// ssm_conv over one chunk of channels of one sequence: n output rows from K - 1 + n input rows.
struct ConvRows {
  const float* hist;  // [K - 1 + n, nc]: the K - 1 rows before the first output row, then its rows
  const float* taps;  // [K, nc]: the weights transposed, oldest tap first
  float* out;         // [n, nc]
  int64_t n, nc, K;
  bool silu;
};
}  // namespace tessera::cpu
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/recurrent.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// y[0, n) += a * x[0, n)
HWY_INLINE void axpy(float a, const float* x, float* y, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  const VF va = hn::Set(df, a);
  int64_t j = 0;
  for (; j + L <= n; j += L) hn::StoreU(hn::MulAdd(va, hn::LoadU(df, x + j), hn::LoadU(df, y + j)), df, y + j);
  for (; j < n; ++j) y[j] += a * x[j];
}

// C[R, NV lanes] (+)= A[R, K] B[K, NV lanes]: R rows of A broadcast against NV vectors of B.
template <int R, int NV>
HWY_INLINE void gemm_tile(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                          bool accumulate) {
  // The loops over r and v are unrolled by pragma: GCC at -O2 otherwise keeps c[][] in memory.
  const DF df;
  const size_t L = hn::Lanes(df);
  VF c[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) c[r][v] = accumulate ? hn::LoadU(df, C + r * ldc + v * L) : hn::Zero(df);
  for (int64_t k = 0; k < K; ++k) {
    VF b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = hn::LoadU(df, B + k * ldb + v * L);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const VF a = hn::Set(df, A[r * lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) c[r][v] = hn::MulAdd(a, b[v], c[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) hn::StoreU(c[r][v], df, C + r * ldc + v * L);
}

// Rows of C in tiles of about eight accumulators: enough independent FMAs to hide their latency.
template <int R>
HWY_INLINE void gemm_rows(int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                          int64_t ldc, bool accumulate) {
  constexpr int NV = R == 1 ? 8 : R == 2 ? 4 : 3;
  const int64_t L = int64_t(hn::Lanes(DF()));
  int64_t j = 0;
  for (; j + NV * L <= N; j += NV * L) gemm_tile<R, NV>(K, A, lda, B + j, ldb, C + j, ldc, accumulate);
  if constexpr (NV >= 3)
    for (; j + 2 * L <= N; j += 2 * L) gemm_tile<R, 2>(K, A, lda, B + j, ldb, C + j, ldc, accumulate);
  for (; j + L <= N; j += L) gemm_tile<R, 1>(K, A, lda, B + j, ldb, C + j, ldc, accumulate);
  for (; j < N; ++j)
    for (int r = 0; r < R; ++r) {
      float acc = accumulate ? C[r * ldc + j] : 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += A[r * lda + k] * B[k * ldb + j];
      C[r * ldc + j] = acc;
    }
}

// Which part of a product a lower-triangular operand lets gemm skip: with kLowerOut only C's
// lower triangle (with its diagonal) is needed; with kLowerA, A is lower-triangular.
enum class Tri { kFull, kLowerOut, kLowerA };

// C[M, N] (+)= A[M, K] B[K, N], all row-major with the given row strides (in floats). For the
// Tri modes, row i of a 4-row tile computes columns / reads A up to the tile's last row only.
HWY_INLINE void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                     int64_t ldc, bool accumulate, Tri tri = Tri::kFull) {
  auto rows = [&](auto R, int64_t i) {
    constexpr int kR = decltype(R)::value;
    const int64_t end = std::min<int64_t>(i + kR, tri == Tri::kFull ? INT64_MAX : std::max(N, K));
    gemm_rows<kR>(tri == Tri::kLowerOut ? std::min(N, end) : N, tri == Tri::kLowerA ? std::min(K, end) : K, A + i * lda,
                  lda, B, ldb, C + i * ldc, ldc, accumulate);
  };
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) rows(std::integral_constant<int, 4>(), i);
  switch (M - i) {
    case 3: rows(std::integral_constant<int, 3>(), i); break;
    case 2: rows(std::integral_constant<int, 2>(), i); break;
    case 1: rows(std::integral_constant<int, 1>(), i); break;
    default: break;
  }
}

// x[r, :D] for r < n: scaled by |mul|, and to unit L2 norm first if |l2|.
void NormaliseRows(float* x, int64_t n, int64_t D, float mul, bool l2, float eps) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  for (int64_t r = 0; r < n; ++r) {
    float* row = x + r * D;
    float f = mul;
    if (l2) {
      VF acc = hn::Zero(df);
      int64_t i = 0;
      for (; i + L <= D; i += L) {
        const VF v = hn::LoadU(df, row + i);
        acc = hn::MulAdd(v, v, acc);
      }
      float ss = hn::GetLane(hn::SumOfLanes(df, acc));
      for (; i < D; ++i) ss += row[i] * row[i];
      f *= 1.0f / std::sqrt(ss + eps);
    }
    const VF vf = hn::Set(df, f);
    int64_t i = 0;
    for (; i + L <= D; i += L) hn::StoreU(hn::Mul(hn::LoadU(df, row + i), vf), df, row + i);
    for (; i < D; ++i) row[i] *= f;
  }
}

// The recurrence one token at a time.
void GdnTokens(const GdnChunk& c) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df)), Dk = c.Dk, Dv = c.Dv;
  float* u = c.scratch;  // [Dv]
  for (int64_t t = 0; t < c.n; ++t) {
    const float* kt = c.k + t * Dk;
    const float* qt = c.q + t * Dk;
    float* o = c.o + t * Dv;
    const float decay = std::exp(c.g[t]);
    const VF vd = hn::Set(df, decay);
    std::fill_n(u, Dv, 0.0f);
    for (int64_t i = 0; i < Dk; ++i) {  // S *= decay; u = S^T k
      float* s = c.S + i * c.s_stride;
      const VF ki = hn::Set(df, kt[i]);
      int64_t j = 0;
      for (; j + L <= Dv; j += L) {
        const VF sv = hn::Mul(hn::LoadU(df, s + j), vd);
        hn::StoreU(sv, df, s + j);
        hn::StoreU(hn::MulAdd(sv, ki, hn::LoadU(df, u + j)), df, u + j);
      }
      for (; j < Dv; ++j) {
        s[j] *= decay;
        u[j] += s[j] * kt[i];
      }
    }
    for (int64_t j = 0; j < Dv; ++j) u[j] = (c.v[t * Dv + j] - u[j]) * c.beta[t];
    std::fill_n(o, Dv, 0.0f);
    for (int64_t i = 0; i < Dk; ++i) {  // S += k u^T; o = S^T q
      float* s = c.S + i * c.s_stride;
      const VF ki = hn::Set(df, kt[i]), qi = hn::Set(df, qt[i]);
      int64_t j = 0;
      for (; j + L <= Dv; j += L) {
        const VF sv = hn::MulAdd(ki, hn::LoadU(df, u + j), hn::LoadU(df, s + j));
        hn::StoreU(sv, df, s + j);
        hn::StoreU(hn::MulAdd(sv, qi, hn::LoadU(df, o + j)), df, o + j);
      }
      for (; j < Dv; ++j) {
        s[j] += kt[i] * u[j];
        o[j] += s[j] * qt[i];
      }
    }
  }
}

// e[s] = exp(gt - g[s]) for s < n (every exponent <= 0 where it is used; clamped below).
HWY_INLINE void exp_diff(float gt, const float* g, int64_t n, float* e) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  const VF vg = hn::Set(df, gt), lo = hn::Set(df, -87.0f);
  int64_t s = 0;
  for (; s + L <= n; s += L) hn::StoreU(hn::Exp(df, hn::Max(hn::Sub(vg, hn::LoadU(df, g + s)), lo)), df, e + s);
  for (; s < n; ++s) e[s] = std::exp(std::max(gt - g[s], -87.0f));
}

// The chunked form (the header comment): n <= kGdnChunk tokens as matrix products.
void GdnChunked(const GdnChunk& c) {
  const int64_t n = c.n, Dk = c.Dk, Dv = c.Dv, C = kGdnChunk;
  float* kt = c.scratch;        // [Dk, C]: K^T
  float* kw = kt + Dk * C;      // [Dk, C]: K^T exp(g_n - g_s), the state update's left factor
  float* rhs = kw + Dk * C;     // [C, Dv]: K S0, then the right-hand side
  float* qs = rhs + C * Dv;     // [C, Dv]: Q S0
  float* u = qs + C * Dv;       // [C, Dv]: U
  float* kk = u + C * Dv;       // [C, C]: K K^T, then (I + A)^-1
  float* qk = kk + C * C;       // [C, C]: Q K^T, then P
  float* g = qk + C * C;        // [C]: cumulative log-decay
  float* e = g + C;             // [C]: a row of exp(g_t - g_s)
  float acc = 0.0f;
  for (int64_t t = 0; t < n; ++t) g[t] = acc += c.g[t];
  for (int64_t s = 0; s < n; ++s)
    for (int64_t i = 0; i < Dk; ++i) kt[i * C + s] = c.k[s * Dk + i];
  gemm(n, Dv, Dk, c.k, Dk, c.S, c.s_stride, rhs, Dv, false);  // K S0
  gemm(n, Dv, Dk, c.q, Dk, c.S, c.s_stride, qs, Dv, false);   // Q S0
  gemm(n, n, Dk, c.k, Dk, kt, C, kk, C, false, Tri::kLowerOut);  // K K^T (lower)
  gemm(n, n, Dk, c.q, Dk, kt, C, qk, C, false, Tri::kLowerOut);  // Q K^T (lower)
  for (int64_t t = 0; t < n; ++t) {
    const float gt = std::exp(g[t]), bt = c.beta[t];
    exp_diff(g[t], g, t + 1, e);
    // Right-hand side beta (v - gamma K S0).
    float* rt = rhs + t * Dv;
    for (int64_t j = 0; j < Dv; ++j) rt[j] = bt * (c.v[t * Dv + j] - gt * rt[j]);
    // P: Q K^T decayed, lower-triangular with its diagonal.
    float* pt = qk + t * C;
    for (int64_t s = 0; s <= t; ++s) pt[s] *= e[s];
    for (int64_t s = t + 1; s < n; ++s) pt[s] = 0.0f;
    // Row t of T = (I + A)^-1 from the rows above it: T[t, :t] = -A[t, :t] T[:t, :t] (e becomes -A[t, :t]).
    float* at = kk + t * C;
    for (int64_t s = 0; s < t; ++s) e[s] = -bt * e[s] * at[s];
    gemm(1, t, t, e, C, kk, C, at, C, false);
    at[t] = 1.0f;
    for (int64_t s = t + 1; s < n; ++s) at[s] = 0.0f;
    // O starts as gamma Q S0.
    float* o = c.o + t * Dv;
    for (int64_t j = 0; j < Dv; ++j) o[j] = gt * qs[t * Dv + j];
  }
  gemm(n, Dv, n, kk, C, rhs, Dv, u, Dv, false, Tri::kLowerA);  // U = T rhs
  gemm(n, Dv, n, qk, C, u, Dv, c.o, Dv, true, Tri::kLowerA);    // O += P U
  // S = gamma_n S0 + (K exp(g_n - g))^T U.
  const float gn = g[n - 1], decay = std::exp(gn);
  for (int64_t s = 0; s < n; ++s) e[s] = std::exp(gn - g[s]);
  for (int64_t i = 0; i < Dk; ++i)
    for (int64_t s = 0; s < n; ++s) kw[i * C + s] = kt[i * C + s] * e[s];
  for (int64_t i = 0; i < Dk; ++i) {
    float* srow = c.S + i * c.s_stride;
    for (int64_t j = 0; j < Dv; ++j) srow[j] *= decay;
  }
  gemm(Dk, Dv, n, kw, C, u, Dv, c.S, c.s_stride, true);
}

// out[r] = sum_j taps[j] * hist[r + j] per channel, then SiLU if asked.
void ConvChunkRows(const ConvRows& c) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df)), nc = c.nc;
  const VF one = hn::Set(df, 1.0f), cap = hn::Set(df, 88.0f);
  for (int64_t r = 0; r < c.n; ++r) {
    const float* h = c.hist + r * nc;
    float* o = c.out + r * nc;
    int64_t j = 0;
    for (; j + L <= nc; j += L) {
      VF acc = hn::Zero(df);
      for (int64_t t = 0; t < c.K; ++t) acc = hn::MulAdd(hn::LoadU(df, c.taps + t * nc + j), hn::LoadU(df, h + t * nc + j), acc);
      if (c.silu) acc = hn::Div(acc, hn::Add(one, hn::Exp(df, hn::Min(hn::Neg(acc), cap))));
      hn::StoreU(acc, df, o + j);
    }
    for (; j < nc; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < c.K; ++t) acc += c.taps[t * nc + j] * h[t * nc + j];
      o[j] = c.silu ? acc / (1.0f + std::exp(std::min(-acc, 88.0f))) : acc;
    }
  }
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(GdnTokens);
HWY_EXPORT(GdnChunked);
HWY_EXPORT(ConvChunkRows);
HWY_EXPORT(NormaliseRows);

namespace {
constexpr int64_t kConvChunk = 256;  // channels per work item
constexpr int64_t kConvRows = 64;    // input rows converted per block

// Element (i0, i1, ...) of an f32 tensor whose last dimension is dense.
float* f32_ptr(const Tensor& t, std::initializer_list<int64_t> idx) {
  char* p = static_cast<char*>(t.host_data());
  int d = 0;
  for (int64_t i : idx) p += i * t.stride[size_t(d++)];
  return reinterpret_cast<float*>(p);
}

// Channels [c0, c0 + n) of row |r| of float tensor |t| as f32 into |dst|.
void load_chunk(const Tensor& t, int64_t r, int64_t c0, int64_t n, float* dst, float* row_scratch) {
  if (last_dim_dense(t)) {
    to_f32(t.dtype, static_cast<const char*>(t.host_data()) + t.row_offset(r) + c0 * dtype_traits(t.dtype).block_bytes, dst, n);
  } else {
    const float* row = load_row_f32(t, r, row_scratch);
    std::copy(row + c0, row + c0 + n, dst);
  }
}

float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(std::min(-x, 88.0f))); }
float softplusf(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// The shortest run of one sequence that takes the chunked form (0: never).
int64_t chunked_min_tokens() {
  const char* e = std::getenv("TESSERA_CPU_GDN_CHUNKED");
  if (!e || !*e) return kGdnChunkedMin;
  char* end = nullptr;
  const long v = std::strtol(e, &end, 10);
  return end && *end == '\0' && v >= 0 ? int64_t(v) : kGdnChunkedMin;
}
}  // namespace

Status ssm_conv(ThreadPool& pool, const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(ref::check_recurrent_metadata(g, n));
  const Tensor& x = g.input_tensor(n, in::kConvX);
  const Tensor& w = g.input_tensor(n, in::kConvW);
  const Tensor& st = g.input_tensor(n, in::kConvState);
  const Tensor& qs = g.input_tensor(n, in::kConvQueryStart);
  const Tensor& slots = g.input_tensor(n, in::kConvSlots);
  const Tensor& out = g.output_tensor(n);
  if (!last_dim_dense(w) || !last_dim_dense(st) || !last_dim_dense(out))
    return Unimplemented("cpu: ssm_conv needs w, the state and the output dense in their last dim");
  const bool silu = n.param<SsmConvParams>().silu;
  const int64_t C = x.shape[1], K = w.shape[1], S = slots.shape[0];
  const int64_t n_chunks = (C + kConvChunk - 1) / kConvChunk;
  pool.parallel_for_dynamic(S * n_chunks, 1, [&](int64_t i0, int64_t i1, int) {
    // Input rows in blocks of kConvRows after the K - 1 rows before them, taps transposed.
    float* hist = thread_scratch(0, (K - 1 + kConvRows) * kConvChunk);
    float* taps = thread_scratch(1, K * kConvChunk);
    float* res = thread_scratch(2, kConvRows * kConvChunk);
    float* row = thread_scratch(3, C);
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t s = item / n_chunks, c0 = (item % n_chunks) * kConvChunk, nc = std::min(kConvChunk, C - c0);
      const int64_t a = ref::load_i32(qs, s), b = ref::load_i32(qs, s + 1), slot = ref::load_i32(slots, s);
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t j = 0; j < K; ++j) taps[j * nc + c] = f32_ptr(w, {c0 + c, j})[0];
      for (int64_t j = 0; j < K - 1; ++j) std::copy_n(f32_ptr(st, {slot, j, c0}), nc, hist + j * nc);
      for (int64_t r0 = a; r0 < b; r0 += kConvRows) {
        const int64_t nr = std::min(kConvRows, b - r0);
        for (int64_t r = 0; r < nr; ++r) load_chunk(x, r0 + r, c0, nc, hist + (K - 1 + r) * nc, row);
        HWY_DYNAMIC_DISPATCH(ConvChunkRows)(ConvRows{hist, taps, res, nr, nc, K, silu});
        for (int64_t r = 0; r < nr; ++r)
          from_f32(out.dtype, res + r * nc,
                   static_cast<char*>(out.host_data()) + out.row_offset(r0 + r) + c0 * dtype_traits(out.dtype).block_bytes, nc);
        std::copy_n(hist + nr * nc, (K - 1) * nc, hist);  // the last K - 1 rows lead the next block
      }
      for (int64_t j = 0; j < K - 1; ++j) std::copy_n(hist + j * nc, nc, f32_ptr(st, {slot, j, c0}));
    }
  });
  return OkStatus();
}

Status gated_delta_net(ThreadPool& pool, const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(ref::check_recurrent_metadata(g, n));
  const Tensor& q = g.input_tensor(n, in::kGdnQ);
  const Tensor& k = g.input_tensor(n, in::kGdnK);
  const Tensor& v = g.input_tensor(n, in::kGdnV);
  const Tensor& alpha = g.input_tensor(n, in::kGdnAlpha);
  const Tensor& beta = g.input_tensor(n, in::kGdnBeta);
  const Tensor& st = g.input_tensor(n, in::kGdnState);
  const Tensor& qs = g.input_tensor(n, in::kGdnQueryStart);
  const Tensor& slots = g.input_tensor(n, in::kGdnSlots);
  const Tensor& out = g.output_tensor(n);
  if (!last_dim_dense(st) || st.stride[2] % int64_t(sizeof(float)) != 0)
    return Unimplemented("cpu: gated_delta_net needs the state dense in its last dim");
  const auto& p = n.param<GatedDeltaNetParams>();
  const int64_t Hk = q.shape[1], Dk = q.shape[2], Hv = v.shape[1], Dv = v.shape[2], S = slots.shape[0];
  const bool gated = g.has_input(n, in::kGdnDecayRate);
  std::vector<float> A(static_cast<size_t>(Hv)), dt(static_cast<size_t>(Hv));
  if (gated) {
    std::copy_n(load_row_f32(g.input_tensor(n, in::kGdnDecayRate), 0, A.data()), Hv, A.data());
    std::copy_n(load_row_f32(g.input_tensor(n, in::kGdnDtBias), 0, dt.data()), Hv, dt.data());
  }
  const float scale = p.q_scale > 0.0f ? p.q_scale : float(1.0 / std::sqrt(double(Dk)));
  const int64_t chunked_min = chunked_min_tokens();
  pool.parallel_for_dynamic(S * Hv, 1, [&](int64_t i0, int64_t i1, int) {
    float* qb = thread_scratch(0, kGdnChunk * Dk);
    float* kb = thread_scratch(1, kGdnChunk * Dk);
    float* vb = thread_scratch(2, kGdnChunk * Dv);
    float* ob = thread_scratch(3, kGdnChunk * Dv);
    float* gb = thread_scratch(4, 2 * kGdnChunk);
    float* row = thread_scratch(5, std::max({Dk, Dv, Hv}));
    float* work = thread_scratch(6, gdn_scratch_floats(Dk, Dv));
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t s = item / Hv, h = item % Hv, hk = p.tiled_heads ? h % Hk : h / (Hv / Hk);
      const int64_t a = ref::load_i32(qs, s), b = ref::load_i32(qs, s + 1), slot = ref::load_i32(slots, s);
      for (int64_t c0 = a; c0 < b; c0 += kGdnChunk) {
        const int64_t nc = std::min(kGdnChunk, b - c0);
        for (int64_t t = 0; t < nc; ++t) {
          const int64_t r = c0 + t;
          std::copy_n(load_row_f32(q, r * Hk + hk, row), Dk, qb + t * Dk);
          std::copy_n(load_row_f32(k, r * Hk + hk, row), Dk, kb + t * Dk);
          std::copy_n(load_row_f32(v, r * Hv + h, row), Dv, vb + t * Dv);
          const float x = load_row_f32(alpha, r, row)[h];
          gb[t] = gated ? A[size_t(h)] * softplusf(x + dt[size_t(h)]) : x;
          gb[kGdnChunk + t] = sigmoidf(load_row_f32(beta, r, row)[h]);
        }
        HWY_DYNAMIC_DISPATCH(NormaliseRows)(qb, nc, Dk, scale, p.l2_norm, p.eps);
        HWY_DYNAMIC_DISPATCH(NormaliseRows)(kb, nc, Dk, 1.0f, p.l2_norm, p.eps);
        const GdnChunk c{f32_ptr(st, {slot, h, 0, 0}), st.stride[2] / int64_t(sizeof(float)), qb, kb, vb, gb,
                         gb + kGdnChunk, ob, nc, Dk, Dv, work};
        // The form is chosen per chunk, so a chunk's result depends on its tokens alone, not on
        // how long the step's run is (the scheduler aligns steps to chunks: SchedulerConfig::state_align).
        if (chunked_min > 0 && nc >= chunked_min) HWY_DYNAMIC_DISPATCH(GdnChunked)(c);
        else HWY_DYNAMIC_DISPATCH(GdnTokens)(c);
        for (int64_t t = 0; t < nc; ++t) store_row_f32(out, (c0 + t) * Hv + h, ob + t * Dv);
      }
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

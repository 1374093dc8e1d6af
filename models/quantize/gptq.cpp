// GPTQ: the inverse-Hessian factor and the column sweep (see gptq.h). Written from the paper:
// dampened H, the upper Cholesky factor of H^-1, columns in order, lazy batch updates of 128.
#include "models/quantize/gptq.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

#include "quant/fp8.h"
#include "quant/ggml_blocks.h"
#include "quant/half.h"
#include "quant/int_group.h"

namespace tessera {

void Hessian::add_rows(const float* x, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    const float* xt = x + t * k;
    for (int64_t i = 0; i < k; ++i) {
      const double xi = xt[i];
      double* hi = h.data() + i * k;
      for (int64_t j = 0; j < k; ++j) hi[j] += xi * double(xt[j]);
    }
  }
  tokens += n;
}

namespace {

// Runs fn(i) for i in [0, n) on up to |threads| threads, items handed out in turn.
template <class Fn>
void parallel_for(int64_t n, int threads, Fn fn) {
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t i = next++; i < n; i = next++) fn(i);
  };
  const int nt = int(std::clamp<int64_t>(n, 1, std::max(1, threads)));
  std::vector<std::thread> pool;
  for (int t = 1; t < nt; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
}

// The inner loops, y -= a * x, vectorised for AVX2 where the CPU has it (the build targets plain
// x86-64; GPTQ on a 1536-wide tensor is ~K^2 N multiply-adds).
// NOTE: not under ThreadSanitizer: GCC instruments the ifunc resolver that target_clones emits,
// and the dynamic loader runs that resolver while relocating the executable, before libtsan is
// initialised, so every binary linking this file dies with SIGSEGV before main.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define TS_GPTQ_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TS_GPTQ_CLONES
#endif

template <class T>
void sub_scaled(T* __restrict y, const T* __restrict x, T a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] -= a * x[i];
}
TS_GPTQ_CLONES void sub_scaled_d(double* y, const double* x, double a, int64_t n) { sub_scaled(y, x, a, n); }
TS_GPTQ_CLONES void sub_scaled_f(float* y, const float* x, float a, int64_t n) { sub_scaled(y, x, a, n); }
// Four rows at once, so each x is read once for all of them (the lazy batch update is a GEMM).
TS_GPTQ_CLONES void sub_scaled_f4(float* __restrict y0, float* __restrict y1, float* __restrict y2,
                                  float* __restrict y3, const float* __restrict x, const float* a, int64_t n) {
  const float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y0[i] -= a0 * v;
    y1[i] -= a1 * v;
    y2[i] -= a2 * v;
    y3[i] -= a3 * v;
  }
}

// H = R R^T with R upper triangular (a Cholesky run from the last column backwards), written
// over the upper triangle of |a| [k, k]. Then U = R^-1 is upper triangular and
// U^T U = R^-T R^-1 = H^-1: the factor GPTQ takes from cholesky(inverse(H)), without forming the
// inverse. Outer-product form: column j of R, then its rank-1 update of the rows above, each a
// contiguous y -= a x. False when a pivot is not positive (H not positive definite).
bool reverse_cholesky(std::vector<double>& a, int64_t k) {
  std::vector<double> col(static_cast<size_t>(k));
  for (int64_t j = k - 1; j >= 0; --j) {
    const double s = a[size_t(j * k + j)];
    if (!(s > 0.0)) return false;
    const double d = std::sqrt(s);
    a[size_t(j * k + j)] = d;
    for (int64_t i = 0; i < j; ++i) col[size_t(i)] = a[size_t(i * k + j)] /= d;
    for (int64_t i = 0; i < j; ++i) sub_scaled_d(a.data() + i * k + i, col.data() + i, col[size_t(i)], j - i);
  }
  return true;
}

// U = R^-1 for the upper triangular R in |r|'s upper triangle, row by row from U R = I: row i of U
// is found left to right, each entry folding its row of R into the entries after it.
void invert_upper(const std::vector<double>& r, int64_t k, int threads, std::vector<float>* u) {
  u->assign(size_t(k * k), 0.0f);
  parallel_for(k, threads, [&](int64_t i) {
    std::vector<double> acc(size_t(k), 0.0);
    acc[size_t(i)] = 1.0;
    float* ui = u->data() + i * k;
    for (int64_t m = i; m < k; ++m) {
      const double v = acc[size_t(m)] / r[size_t(m * k + m)];
      ui[m] = float(v);
      sub_scaled_d(acc.data() + m + 1, r.data() + m * k + m + 1, v, k - m - 1);
    }
  });
}

// ---- per-element rounding hooks: |g| is the group's bytes (the whole row, header included, for
// the row-scaled formats; one block otherwise), already fitted by the reference quantiser. Each
// stores element j's code and returns the value it decodes to.

using RoundFn = float (*)(uint8_t* g, int64_t j, float x);

template <uint8_t (*kEncode)(float), float (*kDecode)(uint8_t)>
float round_fp8(uint8_t* g, int64_t j, float x) {
  float s;
  std::memcpy(&s, g, 4);
  const uint8_t c = s > 0.0f ? kEncode(x / s) : uint8_t(0);
  g[4 + j] = c;
  return kDecode(c) * s;
}

float round_int8_pc(uint8_t* g, int64_t j, float x) {
  float s;
  std::memcpy(&s, g, 4);
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  const int q = std::clamp(int(std::lround(x * inv)), -127, 127);
  g[4 + j] = uint8_t(int8_t(q));
  return float(q) * s;
}

float round_q8_0(uint8_t* g, int64_t j, float x) {
  auto* b = reinterpret_cast<BlockQ8_0*>(g);
  const float d = fp16_to_f32(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
  const int q = std::clamp(int(std::lround(x * id)), -127, 127);
  b->qs[j] = int8_t(q);
  return float(q) * d;
}

// Element j of a block packed like Q4_0: low nibble of qs[j] for j < half, high of qs[j - half].
void set_nibble(uint8_t* qs, int64_t j, int64_t half, int q) {
  if (j < half) qs[j] = uint8_t((qs[j] & 0xF0) | q);
  else qs[j - half] = uint8_t((qs[j - half] & 0x0F) | (q << 4));
}

// The 5-bit formats: low nibble as Q4_0, bit 4 of element j in bit j of the little-endian qh.
void set_q5(uint8_t* qh, uint8_t* qs, int64_t j, int q) {
  set_nibble(qs, j, 16, q & 15);
  uint32_t h;
  std::memcpy(&h, qh, 4);
  h = (h & ~(1u << j)) | (uint32_t(q >> 4) << j);
  std::memcpy(qh, &h, 4);
}

// Codes q = clamp(floor(x * id + offset), 0, qmax), as the reference quantisers round.
int round_code(float x, float id, float offset, int qmax) {
  return std::clamp(int(std::floor(x * id + offset)), 0, qmax);
}

float round_q4_0(uint8_t* g, int64_t j, float x) {
  auto* b = reinterpret_cast<BlockQ4_0*>(g);
  const float d = fp16_to_f32(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
  const int q = round_code(x, id, 8.5f, 15);
  set_nibble(b->qs, j, 16, q);
  return float(q - 8) * d;
}

float round_q4_1(uint8_t* g, int64_t j, float x) {
  auto* b = reinterpret_cast<BlockQ4_1*>(g);
  const float d = fp16_to_f32(b->d), m = fp16_to_f32(b->m), id = d != 0.0f ? 1.0f / d : 0.0f;
  const int q = round_code(x - m, id, 0.5f, 15);
  set_nibble(b->qs, j, 16, q);
  return float(q) * d + m;
}

float round_q5_0(uint8_t* g, int64_t j, float x) {
  auto* b = reinterpret_cast<BlockQ5_0*>(g);
  const float d = fp16_to_f32(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
  const int q = round_code(x, id, 16.5f, 31);
  set_q5(b->qh, b->qs, j, q);
  return float(q - 16) * d;
}

float round_q5_1(uint8_t* g, int64_t j, float x) {
  auto* b = reinterpret_cast<BlockQ5_1*>(g);
  const float d = fp16_to_f32(b->d), m = fp16_to_f32(b->m), id = d != 0.0f ? 1.0f / d : 0.0f;
  const int q = round_code(x - m, id, 0.5f, 31);
  set_q5(b->qh, b->qs, j, q);
  return float(q) * d + m;
}

template <int G>
float round_int4(uint8_t* g, int64_t j, float x) {
  auto* b = reinterpret_cast<BlockInt4<G>*>(g);
  const float d = fp16_to_f32(b->d), inv = d > 0.0f ? 1.0f / d : 0.0f;
  const int zero = b->zero;
  const int q = std::clamp(int(std::lround(x * inv)) + zero, 0, 15);
  set_nibble(b->qs, j, G / 2, q);
  return float(q - zero) * d;
}

RoundFn rounding_of(DType t) {
  switch (t) {
    case DType::kFP8_E4M3: return round_fp8<f32_to_fp8_e4m3, fp8_e4m3_to_f32>;
    case DType::kFP8_E5M2: return round_fp8<f32_to_fp8_e5m2, fp8_e5m2_to_f32>;
    case DType::kINT8_PC: return round_int8_pc;
    case DType::kQ8_0: return round_q8_0;
    case DType::kQ4_0: return round_q4_0;
    case DType::kQ4_1: return round_q4_1;
    case DType::kQ5_0: return round_q5_0;
    case DType::kQ5_1: return round_q5_1;
    case DType::kINT4_G32: return round_int4<32>;
    case DType::kINT4_G64: return round_int4<64>;
    case DType::kINT4_G128: return round_int4<128>;
    default: return nullptr;
  }
}

constexpr int64_t kLazyBlock = 128;  // columns whose updates to the rest are batched
constexpr int64_t kRowsPerTask = 16;

// One task's rows of the sweep: w [n, k] and their output rows |dst|.
struct SweepRows {
  DType t;
  const GptqFactor* f;
  float* w;
  uint8_t* dst;
  int64_t n, k;
};

// Where the group holding column |j| of a row starts, and its length.
struct GroupGeometry {
  int64_t elems, bytes, header;
  uint8_t* at(uint8_t* row, int64_t j) const { return header > 0 ? row : row + header + (j / elems) * bytes; }
};

GroupGeometry group_geometry(DType t, int64_t k) {
  const DTypeTraits& tr = dtype_traits(t);
  if (tr.row_header_bytes > 0) return {k, dtype_row_bytes(t, k), tr.row_header_bytes};  // the row's one scale
  return {tr.block_elems, tr.block_bytes, 0};
}

// The batch's errors reach the columns after it: w[:, b1:] -= err[:, :b1-b0] U[b0:b1, b1:].
void batch_update(const SweepRows& s, const std::vector<float>& err, int64_t b0, int64_t b1) {
  const int64_t k = s.k;
  const float* u = s.f->u.data();
  int64_t r = 0;
  for (; r + 4 <= s.n; r += 4) {
    float* w0 = s.w + r * k + b1;
    for (int64_t t = 0; t < b1 - b0; ++t) {
      const float e[4] = {err[size_t(r * kLazyBlock + t)], err[size_t((r + 1) * kLazyBlock + t)],
                          err[size_t((r + 2) * kLazyBlock + t)], err[size_t((r + 3) * kLazyBlock + t)]};
      sub_scaled_f4(w0, w0 + k, w0 + 2 * k, w0 + 3 * k, u + (b0 + t) * k + b1, e, k - b1);
    }
  }
  for (; r < s.n; ++r)
    for (int64_t t = 0; t < b1 - b0; ++t)
      sub_scaled_f(s.w + r * k + b1, u + (b0 + t) * k + b1, err[size_t(r * kLazyBlock + t)], k - b1);
}

void sweep(const SweepRows& s) {
  const DTypeTraits& tr = dtype_traits(s.t);
  const RoundFn round = rounding_of(s.t);
  const GroupGeometry geo = group_geometry(s.t, s.k);
  const int64_t row_bytes = dtype_row_bytes(s.t, s.k), k = s.k;
  const float* u = s.f->u.data();
  std::vector<float> err(size_t(s.n * kLazyBlock));
  std::vector<float> fixed(round ? 0 : size_t(s.n * geo.elems));  // the block's values, for formats without a hook
  for (int64_t b0 = 0; b0 < k; b0 += kLazyBlock) {
    const int64_t b1 = std::min(b0 + kLazyBlock, k);
    for (int64_t j = b0; j < b1; ++j) {
      const int64_t jg = j % geo.elems;
      if (jg == 0) {  // a new group: fit its parameters to the weights as updated so far
        for (int64_t r = 0; r < s.n; ++r) {
          uint8_t* g = geo.at(s.dst + r * row_bytes, j);
          tr.quantize_row(s.w + r * k + j, g, geo.elems);
          if (!round) tr.dequantize_row(g, fixed.data() + r * geo.elems, geo.elems);
        }
      }
      const float* uj = u + j * k;
      const float ujj = uj[j];
      for (int64_t r = 0; r < s.n; ++r) {
        float* wr = s.w + r * k;
        const float q = round ? round(geo.at(s.dst + r * row_bytes, j), jg, wr[j]) : fixed[size_t(r * geo.elems + jg)];
        const float e = (wr[j] - q) / ujj;
        err[size_t(r * kLazyBlock + (j - b0))] = e;
        sub_scaled_f(wr + j + 1, uj + j + 1, e, b1 - j - 1);
      }
    }
    if (b1 < k) batch_update(s, err, b0, b1);
  }
}

}  // namespace

Result<GptqFactor> gptq_factor(const Hessian& h, const std::string& what, double damp_frac, int threads) {
  const int64_t k = h.k;
  double mean_diag = 0.0;
  for (int64_t i = 0; i < k; ++i) mean_diag += h.h[size_t(i * k + i)];
  mean_diag /= double(std::max<int64_t>(k, 1));
  if (!(mean_diag > 0.0) || !std::isfinite(mean_diag))
    return InvalidArgument(what + ": no calibration data reached this weight (" + std::to_string(h.tokens) +
                           " tokens, mean diagonal of H " + std::to_string(mean_diag) + ")");
  GptqFactor f;
  f.k = k;
  std::vector<double> a;
  // NOTE: with few calibration tokens H can be singular; like the reference implementation we
  // damp it, and raise the damping tenfold while the factorisation still fails.
  for (int attempt = 0; attempt < 4; ++attempt) {
    f.damp = damp_frac * mean_diag * std::pow(10.0, attempt);
    a = h.h;
    for (int64_t i = 0; i < k; ++i) a[size_t(i * k + i)] += f.damp;
    if (reverse_cholesky(a, k)) {
      invert_upper(a, k, threads, &f.u);
      return f;
    }
  }
  return InvalidArgument(what + ": calibration matrix H is not positive definite even with damping " +
                         std::to_string(f.damp) + " (mean diagonal " + std::to_string(mean_diag) + ")");
}


bool gptq_supports(DType t) {
  const DTypeTraits& tr = dtype_traits(t);
  return tr.is_quantized && tr.quantize_row && tr.dequantize_row;
}

Status gptq_quantize(DType t, const GptqFactor& f, float* w, int64_t n, int64_t k, uint8_t* dst, int threads,
                     const std::function<void(int64_t)>& progress) {
  if (!gptq_supports(t)) return InvalidArgument(std::string("gptq: format ") + dtype_name(t) + " is not a quantised format");
  if (f.k != k) return InvalidArgument("gptq: factor is " + std::to_string(f.k) + " wide, rows have " + std::to_string(k));
  if (std::string why = dtype_row_check(t, k); !why.empty()) return InvalidArgument("gptq: " + why);
  const int64_t tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t row_bytes = dtype_row_bytes(t, k);
  std::mutex mu;
  int64_t done = 0;
  parallel_for(tasks, threads, [&](int64_t i) {
    const int64_t r0 = i * kRowsPerTask, nr = std::min(kRowsPerTask, n - r0);
    sweep({t, &f, w + r0 * k, dst + r0 * row_bytes, nr, k});
    if (progress) {
      std::lock_guard<std::mutex> lock(mu);
      done += nr;
      progress(done);
    }
  });
  return OkStatus();
}

}  // namespace tessera

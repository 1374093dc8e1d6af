// The GPU kernels of the op set, written once for CUDA, HIP and the host simulator (sim/).
//
// Each kernel is a struct with an Args type (args.h) and a body `run(c, args)` templated on an
// execution context C, which supplies what a kernel asks of the hardware:
//   c.tid() c.ntid()                thread index in the block, block size (1-D blocks)
//   c.bx() c.by() c.nbx() c.nby()   block index and grid size (2-D grids)
//   c.sync()                        __syncthreads
//   c.shfl_xor(v, mask)             butterfly exchange within a warp of kWarp (32) lanes
//   c.shfl(i, src)                  an int32 from lane |src| of the warp
//   c.mma_s8(a0, a1, b, d)          the warp's 16x8x16 int8 matrix multiply-add (mma_s8_shfl says
//                                   how the fragments are laid out): a tensor-core mma.sync on
//                                   NVIDIA sm80+, mma_s8_shfl on HIP, a warp collective in sim/
//   c.template smem<Slot, T, N>()   the block's shared array number Slot
//   c.set_error(err, code)          records the first run-time data error (atomicCAS)
// kernel_ctx.h maps them to CUDA/HIP intrinsics; sim/ runs every thread of a block as a fiber
// on the host, so the conformance suite checks these bodies against the reference without a GPU.
//
// kWarp is 32 on every vendor: HIP's wave64 GPUs run these shuffles in halves (width 32).
#pragma once
#include <math.h>

#include "backends/cuda/args.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TS_KFN __device__ inline __attribute__((always_inline))
#else
#define TS_KFN inline
#endif

namespace tessera::gpu {

inline constexpr int kWarp = 32;

template <class C> TS_KFN float warp_sum(C& c, float v) {
  for (int m = kWarp / 2; m > 0; m /= 2) v += c.shfl_xor(v, m);
  return v;
}
template <class C> TS_KFN float warp_max(C& c, float v) {
  for (int m = kWarp / 2; m > 0; m /= 2) v = fmaxf(v, c.shfl_xor(v, m));
  return v;
}
// The sum of |v| over the block (every thread gets it). Uses shared slot 0 (32 floats).
template <class C> TS_KFN float block_sum(C& c, float v) {
  float* part = c.template smem<0, float, 32>();
  v = warp_sum(c, v);
  if (c.tid() % kWarp == 0) part[c.tid() / kWarp] = v;
  c.sync();
  float s = 0.0f;
  for (int w = 0; w < (c.ntid() + kWarp - 1) / kWarp; ++w) s += part[w];
  c.sync();
  return s;
}
template <class C> TS_KFN float block_max(C& c, float v) {
  float* part = c.template smem<0, float, 32>();
  v = warp_max(c, v);
  if (c.tid() % kWarp == 0) part[c.tid() / kWarp] = v;
  c.sync();
  float s = -INFINITY;
  for (int w = 0; w < (c.ntid() + kWarp - 1) / kWarp; ++w) s = fmaxf(s, part[w]);
  c.sync();
  return s;
}

TS_KFN float gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
TS_KFN float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f)); }

// add, mul, scale, glu, gelu, cast, copy: one block per row, threads over the columns.
struct PointwiseKernel {
  using Args = PointwiseArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t r = c.bx();
    const int64_t n = a.out.cols();
    const uint8_t* ra = a.a.row(r);
    const uint8_t* rb = a.b.p ? a.b.row(r % a.b.rows()) : nullptr;
    uint8_t* ro = a.out.row(r);
    const int64_t sa = a.a.col_stride(), sb = a.b.col_stride(), so = a.out.col_stride();
    for (int64_t i = c.tid(); i < n; i += c.ntid()) {
      const float x = load_f(ra + i * sa, a.a.dtype);
      const float y = rb ? load_f(rb + i * sb, a.b.dtype) : 0.0f;
      float v = x;
      switch (a.op) {
        case Pointwise::kAdd: v = x + y; break;
        case Pointwise::kMul: v = x * y; break;
        case Pointwise::kScale:
          v = x * a.scale;
          if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
          break;
        case Pointwise::kSiluGlu: v = x / (1.0f + expf(-x)) * y; break;
        case Pointwise::kGeluGlu: v = gelu_tanh(x) * y; break;
        case Pointwise::kGelu: v = gelu_erf(x); break;
        case Pointwise::kSigmoidGlu: v = y / (1.0f + expf(fminf(-x, 88.0f))); break;
        case Pointwise::kSwigluOai: {
          const float g = fminf(x, a.limit), u = fminf(fmaxf(y, -a.limit), a.limit);
          v = g / (1.0f + expf(fminf(-a.scale * g, 88.0f))) * (u + 1.0f);
          break;
        }
        case Pointwise::kConvert: break;
      }
      store_f(ro + i * so, a.out.dtype, v);
    }
  }
};

// rms_norm and layer_norm: one block per row.
struct NormKernel {
  using Args = NormArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t r = c.bx(), n = a.x.cols();
    const uint8_t* rx = a.x.row(r);
    uint8_t* ro = a.out.row(r);
    const int64_t sx = a.x.col_stride(), so = a.out.col_stride();
    float mean = 0.0f;
    if (a.layer) {
      float s = 0.0f;
      for (int64_t i = c.tid(); i < n; i += c.ntid()) s += load_f(rx + i * sx, a.x.dtype);
      mean = block_sum(c, s) / float(n);
    }
    float ss = 0.0f;
    for (int64_t i = c.tid(); i < n; i += c.ntid()) {
      const float v = load_f(rx + i * sx, a.x.dtype) - mean;
      ss += v * v;
    }
    const float inv = 1.0f / sqrtf(block_sum(c, ss) / float(n) + a.eps);
    for (int64_t i = c.tid(); i < n; i += c.ntid()) {
      float v = (load_f(rx + i * sx, a.x.dtype) - mean) * inv;
      if (a.w.p) v *= load_f(a.w.p + i * a.w.col_stride(), a.w.dtype);
      if (a.b.p) v += load_f(a.b.p + i * a.b.col_stride(), a.b.dtype);
      store_f(ro + i * so, a.out.dtype, v);
    }
  }
};

struct SoftmaxKernel {
  using Args = SoftmaxArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t r = c.bx(), n = a.x.cols();
    const uint8_t* rx = a.x.row(r);
    uint8_t* ro = a.out.row(r);
    const int64_t sx = a.x.col_stride(), so = a.out.col_stride();
    float mx = -INFINITY;
    for (int64_t i = c.tid(); i < n; i += c.ntid()) mx = fmaxf(mx, load_f(rx + i * sx, a.x.dtype) * a.scale);
    mx = block_max(c, mx);
    float s = 0.0f;
    for (int64_t i = c.tid(); i < n; i += c.ntid()) s += expf(load_f(rx + i * sx, a.x.dtype) * a.scale - mx);
    const float inv = 1.0f / block_sum(c, s);
    for (int64_t i = c.tid(); i < n; i += c.ntid())
      store_f(ro + i * so, a.out.dtype, expf(load_f(rx + i * sx, a.x.dtype) * a.scale - mx) * inv);
  }
};

// Rotary embedding: one block per (token, head) row; angles in double (positions reach 1e5+).
struct RopeKernel {
  using Args = RopeArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t r = c.bx(), H = a.x.shape[1], D = a.x.cols();
    const int32_t position = load_i32(a.pos, r / H);
    const uint8_t* rx = a.x.row(r);
    uint8_t* ro = a.out.row(r);
    const int64_t sx = a.x.col_stride(), so = a.out.col_stride();
    const RopeParams& p = a.p;
    const int half = p.n_dims / 2;
    for (int i = c.tid(); i < half; i += c.ntid()) {
      const int i0 = 2 * i;
      const double ff = a.freq.p ? double(load_f(a.freq.p + i * a.freq.col_stride(), a.freq.dtype)) : 1.0;
      const double theta_extrap = double(position) * pow(double(p.freq_base), -double(i0) / p.n_dims) / ff;
      const double theta_interp = p.freq_scale * theta_extrap;
      double theta = theta_interp, mscale = p.attn_factor;
      if (p.ext_factor != 0.0f) {
        const double lb = 2.0 * log(double(p.freq_base));
        const double lo = fmax(0.0, floor(p.n_dims * log(p.n_ctx_orig / (p.beta_fast * 2.0 * M_PI)) / lb));
        const double hi = fmin(double(p.n_dims - 1), ceil(p.n_dims * log(p.n_ctx_orig / (p.beta_slow * 2.0 * M_PI)) / lb));
        const double y = (i0 / 2 - lo) / fmax(0.001, hi - lo);
        const double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * p.ext_factor;
        theta = theta_interp * (1.0 - ramp) + theta_extrap * ramp;
        mscale *= 1.0 + 0.1 * log(1.0 / p.freq_scale);
      }
      const double cs = cos(theta) * mscale, sn = sin(theta) * mscale;
      const bool neox = p.mode == RopeMode::kNeox;
      const int64_t ia = neox ? i : i0, ib = neox ? i + half : i0 + 1;
      const double x0 = load_f(rx + ia * sx, a.x.dtype), x1 = load_f(rx + ib * sx, a.x.dtype);
      store_f(ro + ia * so, a.out.dtype, float(x0 * cs - x1 * sn));
      store_f(ro + ib * so, a.out.dtype, float(x0 * sn + x1 * cs));
    }
    for (int64_t i = p.n_dims + c.tid(); i < D; i += c.ntid()) store_f(ro + i * so, a.out.dtype, load_f(rx + i * sx, a.x.dtype));
  }
};

// decode16 of elements e0.. of a row of |n| elements; returns how many are valid (16, or fewer at
// the end of a float row, whose length need not be a multiple of 16; block formats always fill).
template <DType W>
TS_KFN int decode16_tail(const uint8_t* row, int64_t e0, int64_t n, float* out) {
  if constexpr (W == DType::kF32 || W == DType::kF16 || W == DType::kBF16) {
    if (e0 + 16 > n) {
      const int m = int(n - e0);
      for (int i = 0; i < m; ++i) out[i] = load_f(row + (e0 + i) * (W == DType::kF32 ? 4 : 2), W);
      return m;
    }
  }
  decode::decode16<W>(row, e0, out);
  return 16;
}

// embed: one block per token, threads over runs of 16 elements of the weight row.
template <DType W>
struct EmbedKernel {
  using Args = EmbedArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx(), n = a.out.cols();
    const int32_t id = load_i32(a.ids, t);
    uint8_t* ro = a.out.row(t);
    const int64_t so = a.out.col_stride();
    const bool ok = id >= 0 && id < a.w.shape[0];
    if (!ok && c.tid() == 0) c.set_error(a.err, KernelError::kEmbedId);
    const uint8_t* rw = a.w.row(ok ? id : 0);
    float v[16];
    for (int64_t e0 = 16 * int64_t(c.tid()); e0 < n; e0 += 16 * int64_t(c.ntid())) {
      const int m = decode16_tail<W>(rw, e0, n, v);
      for (int i = 0; i < m; ++i) store_f(ro + (e0 + i) * so, a.out.dtype, ok ? v[i] : 0.0f);
    }
  }
};

// The dot products of up to kMatmulRows activation rows (x rows xrows[0..rows)) with one weight
// row, summed over the warp; every lane returns the sums. Lanes take runs of 16 weights 512
// apart, so a warp reads the row once, in order, for all its activation rows.
template <DType W, class C>
TS_KFN void warp_dots(C& c, const View& x, const int64_t* xrows, int rows, const uint8_t* wrow, int64_t K, float* acc) {
  const int lane = c.tid() % kWarp;
  for (int r = 0; r < kMatmulRows; ++r) acc[r] = 0.0f;
  const int64_t sx = x.col_stride();
  float w[16];
  for (int64_t e0 = 16 * int64_t(lane); e0 < K; e0 += 16 * kWarp) {
    const int n16 = decode16_tail<W>(wrow, e0, K, w);
    for (int r = 0; r < kMatmulRows; ++r) {
      if (r >= rows) break;
      const uint8_t* xr = x.row(xrows[r]) + e0 * sx;
      float s = 0.0f;
      for (int i = 0; i < n16; ++i) s += w[i] * load_f(xr + i * sx, x.dtype);
      acc[r] += s;
    }
  }
  for (int r = 0; r < kMatmulRows; ++r) acc[r] = warp_sum(c, acc[r]);
}

// acc + the dot product of the four int8 lanes of |a| and |b| (dp4a on NVIDIA).
TS_KFN int32_t dot4_i8(int32_t a, int32_t b, int32_t acc) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, acc);
#elif defined(__HIP_DEVICE_COMPILE__) && \
    (defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx1030__))
  // v_dot4_i32_i8 on the targets known to have it (gfx90a and gfx1030 are built with -Werror on
  // every build; gfx906/gfx908 were compile-checked with hipcc); no clamp: wraps as dp4a does.
  // Other targets (RDNA3 has only the mixed-sign form) keep the loop.
  return __builtin_amdgcn_sdot4(a, b, acc, false);
#else
  // Other HIP targets and the host simulator.
  for (int i = 0; i < 4; ++i)
    acc += int32_t(int8_t(uint32_t(a) >> (8 * i))) * int32_t(int8_t(uint32_t(b) >> (8 * i)));
  return acc;
#endif
}

// D += A B for one warp, A 16x16 and B 16x8 int8, D 16x8 int32, in the fragments of PTX's
// mma.m16n8k16.row.col.s32.s8.s8.s32: lane l = 4 g + t (g = l / 4, t = l % 4) holds
//   a0 = A[g][4t .. 4t+3], a1 = A[g+8][4t .. 4t+3]   (four int8 per word, low byte first)
//   b  = B[4t .. 4t+3][g]                            (a column of B: a weight row's codes)
//   d  = D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]
// This form gathers A's rows and B's columns with 16 shuffles and sums them with dp4a: HIP's
// path (no MFMA kernel yet), and what sim/'s collective is checked against.
template <class C>
TS_KFN void mma_s8_shfl(C& c, int32_t a0, int32_t a1, int32_t b, int32_t* d) {
  const int lane = c.tid() % kWarp, g = lane >> 2, t = lane & 3;
  for (int q = 0; q < 4; ++q) {
    const int32_t lo = c.shfl(a0, 4 * g + q), hi = c.shfl(a1, 4 * g + q);  // A[g], A[g+8], k = 4q..
    const int32_t b0 = c.shfl(b, 8 * t + q), b1 = c.shfl(b, 8 * t + 4 + q);  // B columns 2t, 2t+1
    d[0] = dot4_i8(lo, b0, d[0]);
    d[1] = dot4_i8(lo, b1, d[1]);
    d[2] = dot4_i8(hi, b0, d[2]);
    d[3] = dot4_i8(hi, b1, d[3]);
  }
}

// quantize_q8: each run of 16 activations of a row to int8 codes with scale amax / 127, and the
// sum of the quantised values (Q8Run). The sum is of the codes, not of x: a weight's offset then
// multiplies the same quantised x as its codes do, so the error is sum(w_i e_i) with w centred,
// not sum(scale q_i e_i) with q in 0..15 (3-4x the NMSE on Q4_1 and INT4_G*).
// Block per row, a thread per run.
struct QuantizeQ8Kernel {
  using Args = QuantizeQ8Args;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t r = c.bx();
    const uint8_t* rx = a.x.row(r);
    const int64_t sx = a.x.col_stride();
    for (int64_t j = c.tid(); j < a.runs; j += c.ntid()) {
      float v[16], amax = 0.0f;
      bool nan = false;
      for (int i = 0; i < 16; ++i) {
        v[i] = load_f(rx + (16 * j + i) * sx, a.x.dtype);
        amax = fmaxf(amax, fabsf(v[i]));
        nan = nan || v[i] != v[i];
      }
      Q8Run out;
      // A NaN in the run makes its scale NaN (the float path's result); infinities make it inf.
      out.d = nan ? NAN : amax / 127.0f;
      // Runs too small for 127 / amax to be finite quantise to zero codes (their values are below
      // f32's normal range once scaled by any weight); the codes are clamped, so no float-to-int
      // conversion sees a NaN or an out-of-range value.
      const float inv = amax > 1e-30f && amax <= 3.0e38f ? 127.0f / amax : 0.0f;
      int32_t total = 0;
      for (int w = 0; w < 4; ++w) {
        uint32_t word = 0;
        for (int b = 0; b < 4; ++b) {
          // fmaxf/fminf return the number for a NaN operand, so |scaled| is always in range.
          const int32_t code = int32_t(rintf(fminf(127.0f, fmaxf(-127.0f, v[4 * w + b] * inv))));
          total += code;
          word |= uint32_t(uint8_t(int8_t(code))) << (8 * b);
        }
        out.q[w] = int32_t(word);
      }
      out.sum = out.d * float(total);
      a.out[r * a.runs + j] = out;
    }
  }
};

// warp_dots on quantised activations (Q8Run): each lane takes runs of 16 weights 512 apart as
// int8 codes (decode::int_run16) and sums scale * d * (q . xq) + offset * sum(x) per row, four
// dp4a per run and row instead of sixteen FMAs and sixteen activation loads.
template <DType W, class C>
TS_KFN void warp_dots_q8(C& c, const Q8Run* xq, int64_t runs, const int64_t* xrows, int rows, const uint8_t* wrow,
                         float* acc) {
  const int lane = c.tid() % kWarp;
  for (int r = 0; r < kMatmulRows; ++r) acc[r] = 0.0f;
  int8_t q[16];
  for (int64_t j = lane; j < runs; j += kWarp) {
    float scale, offset;
    decode::int_run16<W>(wrow, 16 * j, q, scale, offset);
    int32_t wq[4];  // the 16 codes, four per word (little-endian, as quantize_q8 packs x)
    __builtin_memcpy(wq, q, sizeof wq);
    for (int r = 0; r < kMatmulRows; ++r) {
      if (r >= rows) break;
      const Q8Run& x = xq[xrows[r] * runs + j];
      int32_t s = 0;
      for (int w = 0; w < 4; ++w) s = dot4_i8(wq[w], x.q[w], s);
      acc[r] += scale * (x.d * float(s)) + offset * x.sum;
    }
  }
  for (int r = 0; r < kMatmulRows; ++r) acc[r] = warp_sum(c, acc[r]);
}

// warp_dots_q8 when the activations were quantised (xq) and the format has integer runs, else
// warp_dots.
template <DType W, class C>
TS_KFN void dots(C& c, const View& x, const Q8Run* xq, const int64_t* xrows, int rows, const uint8_t* wrow, int64_t K,
                 float* acc) {
  if constexpr (decode::kHasIntRun<W>) {
    if (xq) return warp_dots_q8<W>(c, xq, K / 16, xrows, rows, wrow, acc);
  }
  warp_dots<W>(c, x, xrows, rows, wrow, K, acc);
}

// matmul: out[M, N] = x[M, K] w[N, K]^T (+ bias). Block: kMatmulWarps warps, one output column
// each; grid (N / warps, M / kMatmulRows). Integer-coded weights with quantised activations
// (a.xq) take the int8 dot-product path.
template <DType W>
struct MatmulKernel {
  using Args = MatmulArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t n = int64_t(c.bx()) * kMatmulWarps + c.tid() / kWarp;
    const int64_t N = a.w.shape[0], K = a.x.cols(), M = a.x.rows();
    if (n >= N) return;  // the whole warp
    const int64_t m0 = int64_t(c.by()) * kMatmulRows;
    const int rows = int(M - m0 < kMatmulRows ? M - m0 : kMatmulRows);
    float acc[kMatmulRows];
    int64_t xrows[kMatmulRows];
    for (int r = 0; r < kMatmulRows; ++r) xrows[r] = m0 + r;
    dots<W>(c, a.x, a.xq, xrows, rows, a.w.row(n), K, acc);
    const float bias = a.bias.p ? load_f(a.bias.p + n * a.bias.col_stride(), a.bias.dtype) : 0.0f;
    const int lane = c.tid() % kWarp;
    if (lane < rows) {
      float v = 0.0f;
      for (int r = 0; r < kMatmulRows; ++r)
        if (r == lane) v = acc[r];
      store_f(a.out.row(m0 + lane) + n * a.out.col_stride(), a.out.dtype, v + bias);
    }
  }
};

// matmul on tensor cores (integer-coded weights, quantised activations, kMmaMinRows rows and
// more): out[M, N] = x w^T (+ bias). Block: kMmaWarps warps over a kMmaTile x kMmaTile tile of out
// (grid: N / kMmaTile, M / kMmaTile); each warp a 32 x 32 quarter, 2 x 4 mma tiles of 16 x 8.
// Per chunk of kMmaChunkRuns runs of 16, the block stages x's codes (Q8Run) and w's
// (decode::int_run16) with their scales in shared memory; each run of 16 is one mma per tile,
// whose int32 sums are scaled as warp_dots_q8 scales its dp4a sums: scale * (d * s) + offset *
// sum. Rows and runs outside the matrix are staged as zero codes with zero scales.
template <DType W>
struct MatmulMmaKernel {
  using Args = MatmulArgs;
  static constexpr int kStride = 20;  // words per staged row: 16 of codes, 4 of padding (no bank conflicts)
  static constexpr int kRuns = kMmaChunkRuns;
  static constexpr int kScales = kMmaTile * kRuns;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    int32_t* xs = c.template smem<0, int32_t, kMmaTile * kStride>();
    int32_t* ws = c.template smem<1, int32_t, kMmaTile * kStride>();
    float* xf = c.template smem<2, float, 2 * kScales>();  // d [row][run], then sum
    float* wf = c.template smem<3, float, 2 * kScales>();  // scale [row][run], then offset
    const int64_t N = a.w.shape[0], M = a.x.rows(), runs = a.x.cols() / 16;
    const int64_t m0 = int64_t(c.by()) * kMmaTile, n0 = int64_t(c.bx()) * kMmaTile;
    const int warp = c.tid() / kWarp, lane = c.tid() % kWarp, g = lane >> 2, t = lane & 3;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    float acc[2][4][4];
    for (int mt = 0; mt < 2; ++mt)
      for (int nt = 0; nt < 4; ++nt)
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
    for (int64_t j0 = 0; j0 < runs; j0 += kRuns) {
      for (int u = c.tid(); u < kMmaTile * kRuns; u += c.ntid()) {
        const int row = u / kRuns, jj = u % kRuns;
        const int64_t j = j0 + jj;
        int32_t* xd = xs + row * kStride + 4 * jj;
        if (m0 + row < M && j < runs) {
          const Q8Run& r = a.xq[(m0 + row) * runs + j];
          for (int w = 0; w < 4; ++w) xd[w] = r.q[w];
          xf[row * kRuns + jj] = r.d;
          xf[kScales + row * kRuns + jj] = r.sum;
        } else {
          for (int w = 0; w < 4; ++w) xd[w] = 0;
          xf[row * kRuns + jj] = 0.0f;
          xf[kScales + row * kRuns + jj] = 0.0f;
        }
        int32_t* wd = ws + row * kStride + 4 * jj;
        float scale = 0.0f, offset = 0.0f;
        int8_t q[16];
        if (n0 + row < N && j < runs) {
          decode::int_run16<W>(a.w.row(n0 + row), 16 * j, q, scale, offset);
        } else {
          for (int i = 0; i < 16; ++i) q[i] = 0;
        }
        __builtin_memcpy(wd, q, sizeof q);
        wf[row * kRuns + jj] = scale;
        wf[kScales + row * kRuns + jj] = offset;
      }
      c.sync();
      const int nk = int(runs - j0 < kRuns ? runs - j0 : kRuns);
      for (int kk = 0; kk < nk; ++kk) {
        int32_t af[2][2], bf[4];
        for (int mt = 0; mt < 2; ++mt) {
          const int r = wm + 16 * mt + g;
          af[mt][0] = xs[r * kStride + 4 * kk + t];
          af[mt][1] = xs[(r + 8) * kStride + 4 * kk + t];
        }
        for (int nt = 0; nt < 4; ++nt) bf[nt] = ws[(wn + 8 * nt + g) * kStride + 4 * kk + t];
        // This run's scales of the lane's rows (g, g + 8 of each m tile) and columns (2t, 2t + 1
        // of each n tile).
        float xd[2][2], xsum[2][2], wsc[4][2], wof[4][2];
        for (int mt = 0; mt < 2; ++mt)
          for (int h = 0; h < 2; ++h) {
            const int row = wm + 16 * mt + g + 8 * h;
            xd[mt][h] = xf[row * kRuns + kk];
            xsum[mt][h] = xf[kScales + row * kRuns + kk];
          }
        for (int nt = 0; nt < 4; ++nt)
          for (int h = 0; h < 2; ++h) {
            const int col = wn + 8 * nt + 2 * t + h;
            wsc[nt][h] = wf[col * kRuns + kk];
            wof[nt][h] = wf[kScales + col * kRuns + kk];
          }
        for (int mt = 0; mt < 2; ++mt) {
          for (int nt = 0; nt < 4; ++nt) {
            int32_t d[4] = {0, 0, 0, 0};
            c.mma_s8(af[mt][0], af[mt][1], bf[nt], d);
            for (int i = 0; i < 4; ++i)
              acc[mt][nt][i] += wsc[nt][i & 1] * (xd[mt][i >> 1] * float(d[i])) + wof[nt][i & 1] * xsum[mt][i >> 1];
          }
        }
      }
      c.sync();
    }
    for (int mt = 0; mt < 2; ++mt) {
      for (int nt = 0; nt < 4; ++nt) {
        for (int i = 0; i < 4; ++i) {
          const int64_t m = m0 + wm + 16 * mt + g + 8 * (i >> 1), n = n0 + wn + 8 * nt + 2 * t + (i & 1);
          if (m >= M || n >= N) continue;
          const float bias = a.bias.p ? load_f(a.bias.p + n * a.bias.col_stride(), a.bias.dtype) : 0.0f;
          store_f(a.out.row(m) + n * a.out.col_stride(), a.out.dtype, acc[mt][nt][i] + bias);
        }
      }
    }
  }
};

// matmul_id, step 1 (one block): the (token, slot) pairs p = t * k + j grouped by expert, in
// token order within each expert (deterministic: no atomics): offsets[g] .. offsets[g + 1] of
// order[] are group g's pairs; group E collects pairs whose id is out of range (an error).
struct MoeSortKernel {
  using Args = MoeSortArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t P = a.ids.rows() * a.ids.cols(), E = a.experts;
    auto group = [&](int64_t p) {
      const int32_t e = load_i32(a.ids, p);
      return e >= 0 && e < E ? int64_t(e) : E;
    };
    for (int64_t g = c.tid(); g <= E; g += c.ntid()) {
      int32_t n = 0;
      for (int64_t p = 0; p < P; ++p) n += group(p) == g;
      a.offsets[g + 1] = n;
    }
    c.sync();
    if (c.tid() == 0) {
      a.offsets[0] = 0;
      for (int64_t g = 0; g <= E; ++g) a.offsets[g + 1] += a.offsets[g];
      if (a.offsets[E + 1] > a.offsets[E]) c.set_error(a.err, KernelError::kExpertId);
    }
    c.sync();
    for (int64_t g = c.tid(); g <= E; g += c.ntid()) {
      int32_t at = a.offsets[g];
      for (int64_t p = 0; p < P; ++p)
        if (group(p) == g) a.order[at++] = int32_t(p);
    }
  }
};

// matmul_id, step 2: one grouped launch. Block y is one tile of up to kMatmulRows pairs of one
// expert (tiles numbered across the experts in order; blocks past the last tile exit), each warp
// one output column: the expert's weight row is read once for the tile's rows, as a matmul
// reads it. Results go to out row p (no weights) or to y[p, N] for the weighted sum.
template <DType W>
struct MatmulIdKernel {
  using Args = MatmulIdArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t n = int64_t(c.bx()) * kMatmulWarps + c.tid() / kWarp;
    const int64_t E = a.w.shape[0], N = a.w.shape[1], K = a.w.cols(), k = a.ids.cols();
    if (n >= N) return;
    int64_t tile = c.by(), g = 0;
    for (; g <= E; ++g) {
      const int64_t tiles = (a.offsets[g + 1] - a.offsets[g] + kMatmulRows - 1) / kMatmulRows;
      if (tile < tiles) break;
      tile -= tiles;
    }
    if (g > E) return;  // the whole block: no tile left
    const int64_t p0 = a.offsets[g] + tile * kMatmulRows;
    const int64_t left = a.offsets[g + 1] - p0;
    const int rows = int(left < kMatmulRows ? left : kMatmulRows);
    int64_t pairs[kMatmulRows], xrows[kMatmulRows];
    for (int r = 0; r < kMatmulRows; ++r) {
      pairs[r] = r < rows ? a.order[p0 + r] : 0;
      xrows[r] = a.x.rank == 2 ? pairs[r] / k : pairs[r];
    }
    float acc[kMatmulRows];
    if (g < E) {
      dots<W>(c, a.x, a.xq, xrows, rows, a.w.row(g * N + n), K, acc);
    } else {
      for (float& v : acc) v = 0.0f;  // out-of-range ids (reported by the sort): zeros
    }
    const int lane = c.tid() % kWarp;
    if (lane < rows) {
      float v = 0.0f;
      int64_t p = 0;
      for (int r = 0; r < kMatmulRows; ++r)
        if (r == lane) v = acc[r], p = pairs[r];
      if (a.bias.p && g < E) v += load_f(a.bias.row(g) + n * a.bias.col_stride(), a.bias.dtype);
      if (a.y) a.y[p * N + n] = v;
      else store_f(a.out.row(p) + n * a.out.col_stride(), a.out.dtype, v);
    }
  }
};

// matmul_id, step 3 (weighted): out[t] = sum_j weights[t, j] * y[t * k + j], j in order.
struct MoeWeightedSumKernel {
  using Args = MoeWeightedSumArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx(), N = a.out.cols(), k = a.weights.cols();
    const uint8_t* rw = a.weights.row(t);
    uint8_t* ro = a.out.row(t);
    for (int64_t n = c.tid(); n < N; n += c.ntid()) {
      float total = 0.0f;
      for (int64_t j = 0; j < k; ++j)
        total += load_f(rw + j * a.weights.col_stride(), a.weights.dtype) * a.y[(t * k + j) * N + n];
      store_f(ro + n * a.out.col_stride(), a.out.dtype, total);
    }
  }
};

// topk_route: one thread per token (E <= kMaxRouteExperts), ties to the lower expert index.
struct TopkRouteKernel {
  using Args = TopkRouteArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = int64_t(c.bx()) * c.ntid() + c.tid();
    if (t >= a.logits.rows()) return;
    const int E = int(a.logits.cols());
    float score[kMaxRouteExperts], sel[kMaxRouteExperts];
    const uint8_t* rl = a.logits.row(t);
    const int64_t sl = a.logits.col_stride();
    float mx = -INFINITY;
    for (int e = 0; e < E; ++e) { score[e] = load_f(rl + e * sl, a.logits.dtype); mx = fmaxf(mx, score[e]); }
    const TopkRouteParams& p = a.p;
    if (p.scoring == RouteScoring::kSoftmax) {
      float s = 0.0f;
      for (int e = 0; e < E; ++e) { score[e] = expf(score[e] - mx); s += score[e]; }
      for (int e = 0; e < E; ++e) score[e] /= s;
    } else {
      for (int e = 0; e < E; ++e) score[e] = 1.0f / (1.0f + expf(-score[e]));
    }
    for (int e = 0; e < E; ++e)
      sel[e] = score[e] + (a.bias.p ? load_f(a.bias.p + e * a.bias.col_stride(), a.bias.dtype) : 0.0f);
    if (p.n_groups > 1) {
      const int gs = E / p.n_groups;
      float best[64];
      bool keep[64];
      for (int g = 0; g < p.n_groups; ++g) {
        best[g] = -INFINITY;
        keep[g] = false;
        for (int e = g * gs; e < (g + 1) * gs; ++e) best[g] = fmaxf(best[g], sel[e]);
      }
      for (int i = 0; i < p.topk_groups; ++i) {
        int bi = -1;
        for (int g = 0; g < p.n_groups; ++g)
          if (!keep[g] && (bi < 0 || best[g] > best[bi])) bi = g;
        keep[bi] = true;
      }
      for (int e = 0; e < E; ++e)
        if (!keep[e / gs]) sel[e] = -INFINITY;
    }
    uint32_t taken[kMaxRouteExperts / 32];
    for (int i = 0; i < kMaxRouteExperts / 32; ++i) taken[i] = 0;
    float w[64];
    int ids[64];
    float sum = 0.0f;
    for (int j = 0; j < p.k; ++j) {
      int bi = -1;
      for (int e = 0; e < E; ++e)
        if (!((taken[e / 32] >> (e % 32)) & 1u) && (bi < 0 || sel[e] > sel[bi])) bi = e;
      taken[bi / 32] |= 1u << (bi % 32);
      ids[j] = bi;
      w[j] = score[bi];
      sum += w[j];
    }
    uint8_t* ri = a.ids.row(t);
    uint8_t* rw = a.weights.row(t);
    for (int j = 0; j < p.k; ++j) {
      const float v = (p.renormalize && sum > 0.0f ? w[j] / sum : w[j]) * p.weight_scale;
      const uint32_t u = uint32_t(ids[j]);
      uint8_t* p = ri + j * a.ids.col_stride();
      for (int b = 0; b < 4; ++b) p[b] = uint8_t(u >> (8 * b));
      store_f(rw + j * a.weights.col_stride(), a.weights.dtype, v);
    }
  }
};

// A KV cache row is f32/f16/bf16, or row-scaled FP8 E4M3 / INT8_PC ([f32 scale] then one code per
// element). Element c is kv_code(row, t, c) * kv_scale(row, t): the scale is read once per row.
TS_KFN float kv_scale(const uint8_t* row, DType t) {
  return t == DType::kFP8_E4M3 || t == DType::kINT8_PC ? decode::f32_at(row) : 1.0f;
}
TS_KFN float kv_code(const uint8_t* row, DType t, int64_t c) {
  if (t == DType::kFP8_E4M3) return decode::fp8_e4m3_to_f32(row[4 + c]);
  if (t == DType::kINT8_PC) return float(int8_t(row[4 + c]));
  return load_f(row + c * (t == DType::kF32 ? 4 : 2), t);
}

// Stores the new tokens' K and V in their cache slots: one block per token, a warp per KV head.
struct KvStoreKernel {
  using Args = KvStoreArgs;
  template <class C> TS_KFN static void store_row(C& c, const View& src, int64_t sr, const View& cache, int64_t cr) {
    const int lane = c.tid() % kWarp;
    const int64_t D = src.cols(), ss = src.col_stride();
    const uint8_t* rs = src.row(sr);
    uint8_t* rc = cache.row(cr);
    const DType t = cache.dtype;
    if (t == DType::kFP8_E4M3 || t == DType::kINT8_PC) {
      float amax = 0.0f;
      for (int64_t i = lane; i < D; i += kWarp) amax = fmaxf(amax, fabsf(load_f(rs + i * ss, src.dtype)));
      amax = warp_max(c, amax);
      const float scale = amax / (t == DType::kFP8_E4M3 ? 448.0f : 127.0f);
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      if (lane == 0) store_f(rc, DType::kF32, scale);
      for (int64_t i = lane; i < D; i += kWarp) {
        const float x = load_f(rs + i * ss, src.dtype);
        uint8_t code = 0;
        if (t == DType::kFP8_E4M3) {
          code = scale > 0.0f ? decode::f32_to_fp8_e4m3(x / scale) : uint8_t(0);
        } else {
          const float q = roundf(x * inv);
          code = uint8_t(int8_t(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q));
        }
        rc[4 + i] = code;
      }
    } else {
      const int64_t sc = t == DType::kF32 ? 4 : 2;
      for (int64_t i = lane; i < D; i += kWarp) store_f(rc + i * sc, t, load_f(rs + i * ss, src.dtype));
    }
  }
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx(), H = a.k.shape[1];
    const int32_t slot = load_i32(a.slots, t);
    if (slot < 0) return;
    if (slot >= a.n_slots) {
      if (c.tid() == 0) c.set_error(a.err, KernelError::kAttnMetadata);
      return;
    }
    for (int64_t h = c.tid() / kWarp; h < H; h += c.ntid() / kWarp) {
      store_row(c, a.k, t * H + h, a.k_cache, int64_t(slot) * H + h);
      store_row(c, a.v, t * H + h, a.v_cache, int64_t(slot) * H + h);
    }
  }
};

// Folds a sink logit (gpt-oss) into a softmax's running max |M| and denominator |L|: the sink is
// one more term of the denominator with no value row. Returns the factor the unnormalised
// accumulator (taken relative to the old |M|) must take (0 when no key was seen, M = -inf).
TS_KFN float fold_sink(const View& sinks, int64_t h, float& M, float& L) {
  if (!sinks.p) return 1.0f;
  const float sink = load_f(sinks.p + h * sinks.col_stride(), DType::kF32);
  const float m = fmaxf(M, sink), corr = L > 0.0f ? expf(M - m) : 0.0f;
  L = L * corr + expf(sink - m);
  M = m;
  return corr;
}

// Paged attention of one query row (token, head) over its sequence's cached keys: kAttnWarps
// warps take keys in turn, each with its own online softmax, merged at the end. With split-K
// (a.splits > 1, grid x = rows * splits) the block takes one part of the keys and leaves its
// unnormalised sum, max and denominator to AttentionCombineKernel.
template <int kMaxD>
struct AttentionKernelT {
  using Args = AttentionArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx() / a.splits, split = c.bx() % a.splits, h = c.by();
    const int64_t Hq = a.q.shape[1], D = a.q.cols(), T = a.q.shape[0];
    float* part = a.splits > 1 ? a.partial + ((t * Hq + h) * a.splits + split) * (D + 2) : nullptr;
    const int64_t group = Hq / a.hkv, hk = h / group;
    const int lane = c.tid() % kWarp, warp = c.tid() / kWarp;
    float* q = c.template smem<1, float, kMaxD>();
    float* om = c.template smem<2, float, kAttnWarps*(kMaxD + 2)>();
    // The sequence of token t: the last s with query_start[s] <= t.
    int64_t lo_s = 0, hi_s = a.n_seqs - 1;
    while (lo_s < hi_s) {
      const int64_t mid = (lo_s + hi_s + 1) / 2;
      if (load_i32(a.query_start, mid) <= t) lo_s = mid;
      else hi_s = mid - 1;
    }
    const int64_t s = lo_s;
    const int64_t q0 = load_i32(a.query_start, s), q1 = load_i32(a.query_start, s + 1);
    const int64_t len = load_i32(a.seq_lens, s), n_new = q1 - q0;
    const int64_t max_blocks = a.block_tables.cols();
    const bool ok = load_i32(a.query_start, 0) == 0 && load_i32(a.query_start, a.n_seqs) == T && q0 <= t && t < q1 &&
                    len >= n_new && (len + a.block_size - 1) / a.block_size <= max_blocks;
    uint8_t* ro = a.out.row(t * Hq + h);
    const int64_t so = a.out.col_stride();
    if (!ok) {
      if (c.tid() == 0) c.set_error(a.err, KernelError::kAttnMetadata);
      if (part) {
        if (c.tid() == 0) { part[D] = -INFINITY; part[D + 1] = 0.0f; }  // the combine writes zeros
      } else {
        for (int64_t i = c.tid(); i < D; i += c.ntid()) store_f(ro + i * so, a.out.dtype, 0.0f);
      }
      return;
    }
    const int64_t pos = len - n_new + (t - q0);
    int64_t lo = a.sliding_window > 0 && pos - a.sliding_window + 1 > 0 ? pos - a.sliding_window + 1 : 0;
    int64_t hi = a.causal ? pos : len - 1;
    if (part) {  // this block's part of the keys (possibly none)
      const int64_t chunk = (hi - lo + 1 + a.splits - 1) / a.splits;
      lo += split * chunk;
      hi = hi < lo + chunk - 1 ? hi : lo + chunk - 1;
    }
    const uint8_t* rq = a.q.row(t * Hq + h);
    for (int64_t i = c.tid(); i < D; i += c.ntid()) q[i] = load_f(rq + i * a.q.col_stride(), a.q.dtype);
    c.sync();
    constexpr int kPer = kMaxD / kWarp;
    float o[kPer];
    for (int i = 0; i < kPer; ++i) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    bool bad = false;
    for (int64_t j = lo + warp; j <= hi; j += kAttnWarps) {
      const int32_t blk = load_i32(a.block_tables, s * max_blocks + j / a.block_size);
      if (blk < 0 || blk >= a.n_blocks) { bad = true; continue; }  // uniform over the warp
      const int64_t slot = int64_t(blk) * a.block_size + j % a.block_size;
      const uint8_t* rk = a.k_cache.row(slot * a.hkv + hk);
      const uint8_t* rv = a.v_cache.row(slot * a.hkv + hk);
      const float ks = kv_scale(rk, a.k_cache.dtype), vs = kv_scale(rv, a.v_cache.dtype);
      float d = 0.0f;
      for (int64_t i = lane; i < D; i += kWarp) d += q[i] * (kv_code(rk, a.k_cache.dtype, i) * ks);
      d = warp_sum(c, d) * a.scale;
      if (a.softcap > 0.0f) d = a.softcap * tanhf(d / a.softcap);
      const float m_new = fmaxf(m, d);
      const float corr = expf(m - m_new), p = expf(d - m_new);
      l = l * corr + p;
      for (int i = 0; i < kPer; ++i)
        if (lane + i * kWarp < D) o[i] = o[i] * corr + p * (kv_code(rv, a.v_cache.dtype, lane + i * kWarp) * vs);
      m = m_new;
    }
    if (bad && lane == 0) c.set_error(a.err, KernelError::kAttnMetadata);
    float* mine = om + warp * (kMaxD + 2);
    for (int i = 0; i < kPer; ++i)
      if (lane + i * kWarp < D) mine[lane + i * kWarp] = o[i];
    if (lane == 0) {
      mine[kMaxD] = m;
      mine[kMaxD + 1] = l;
    }
    c.sync();
    float M = -INFINITY;
    for (int w = 0; w < kAttnWarps; ++w) M = fmaxf(M, om[w * (kMaxD + 2) + kMaxD]);
    float L = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) {
      const float* ow = om + w * (kMaxD + 2);
      if (ow[kMaxD + 1] > 0.0f) L += ow[kMaxD + 1] * expf(ow[kMaxD] - M);
    }
    const float M0 = M;  // the accumulators are relative to the keys' max, before the sink
    const float corr = part ? 1.0f : fold_sink(a.sinks, h, M, L);  // split-K: the combine folds it
    for (int64_t i = c.tid(); i < D; i += c.ntid()) {
      float acc = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) {
        const float* ow = om + w * (kMaxD + 2);
        if (ow[kMaxD + 1] > 0.0f) acc += ow[i] * expf(ow[kMaxD] - M0);
      }
      if (part) part[i] = acc;  // unnormalised, relative to M
      else store_f(ro + i * so, a.out.dtype, L > 0.0f ? acc * corr / L : 0.0f);
    }
    if (part && c.tid() == 0) { part[D] = M; part[D + 1] = L; }
  }
};
// Heads up to 256 wide, and up to 512 (Gemma 4's global layers) with twice the registers and
// shared memory per block, so the narrower heads keep the smaller kernel.
using AttentionKernel = AttentionKernelT<kMaxHeadDim>;
using AttentionKernelWide = AttentionKernelT<kMaxHeadDimWide>;

// attention_combine: merges the split-K partials of one (row, head) per block: out = sum_s
// acc_s e^(M_s - M) / sum_s L_s e^(M_s - M), over the splits that saw keys (L_s > 0).
struct AttentionCombineKernel {
  using Args = AttentionCombineArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t r = c.bx(), D = a.out.cols();
    const float* base = a.partial + r * a.splits * (D + 2);
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < a.splits; ++s)
      if (base[s * (D + 2) + D + 1] > 0.0f) M = fmaxf(M, base[s * (D + 2) + D]);
    for (int s = 0; s < a.splits; ++s) {
      const float* ps = base + s * (D + 2);
      if (ps[D + 1] > 0.0f) L += ps[D + 1] * expf(ps[D] - M);
    }
    const float M0 = M;  // the partials are combined relative to the keys' max, before the sink
    const float corr = fold_sink(a.sinks, r % a.out.shape[1], M, L);
    uint8_t* ro = a.out.row(r);
    const int64_t so = a.out.col_stride();
    for (int64_t i = c.tid(); i < D; i += c.ntid()) {
      float acc = 0.0f;
      for (int s = 0; s < a.splits; ++s) {
        const float* ps = base + s * (D + 2);
        if (ps[D + 1] > 0.0f) acc += ps[i] * expf(ps[D] - M0);
      }
      store_f(ro + i * so, a.out.dtype, L > 0.0f ? acc * corr / L : 0.0f);
    }
  }
};

// ssm_conv: one thread per (sequence, channel), sliding a K-tap window down the sequence's rows
// from its state row and writing the last K-1 inputs back.
struct SsmConvKernel {
  using Args = SsmConvArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t C_ = a.x.cols(), K = a.w.cols();
    const int64_t idx = int64_t(c.bx()) * c.ntid() + c.tid();
    if (idx >= a.n_seqs * C_) return;
    const int64_t s = idx / C_, ch = idx % C_;
    const int64_t b0 = load_i32(a.query_start, s), b1 = load_i32(a.query_start, s + 1), slot = load_i32(a.slots, s);
    if (slot < 0 || slot >= a.state.shape[0] || b0 < 0 || b1 < b0 || b1 > a.x.rows()) {
      c.set_error(a.err, KernelError::kStateMetadata);
      return;
    }
    float win[kMaxConvTaps];
    const int64_t ss = a.state.col_stride();
    for (int64_t j = 0; j + 1 < K; ++j) win[j] = load_f(a.state.row(slot * (K - 1) + j) + ch * ss, DType::kF32);
    const uint8_t* tap = a.w.row(ch);
    for (int64_t r = b0; r < b1; ++r) {
      win[K - 1] = load_f(a.x.row(r) + ch * a.x.col_stride(), a.x.dtype);
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) acc += load_f(tap + j * a.w.col_stride(), DType::kF32) * win[j];
      const float y = a.silu ? acc / (1.0f + expf(fminf(-acc, 88.0f))) : acc;
      store_f(a.out.row(r) + ch * a.out.col_stride(), a.out.dtype, y);
      for (int64_t j = 0; j + 1 < K; ++j) win[j] = win[j + 1];
    }
    for (int64_t j = 0; j + 1 < K; ++j) store_f(a.state.row(slot * (K - 1) + j) + ch * ss, DType::kF32, win[j]);
  }
};

// gated_delta_net: one thread per (sequence, value head, state column j), token by token; the
// thread owns column j of its head's [Dk, Dv] state, so no two threads write one element.
struct GatedDeltaNetKernel {
  using Args = GatedDeltaNetArgs;
  template <class C> TS_KFN static void run(C& c, const Args& a) {
    const int64_t Hk = a.q.shape[1], Dk = a.q.shape[2], Hv = a.v.shape[1], Dv = a.v.shape[2];
    const int64_t idx = int64_t(c.bx()) * c.ntid() + c.tid();
    if (idx >= a.n_seqs * Hv * Dv) return;
    const int64_t j = idx % Dv, h = (idx / Dv) % Hv, s = idx / (Dv * Hv), hk = a.tiled_heads ? h % Hk : h / (Hv / Hk);
    const int64_t b0 = load_i32(a.query_start, s), b1 = load_i32(a.query_start, s + 1), slot = load_i32(a.slots, s);
    if (slot < 0 || slot >= a.state.shape[0] || b0 < 0 || b1 < b0 || b1 > a.q.shape[0]) {
      c.set_error(a.err, KernelError::kStateMetadata);
      return;
    }
    const int64_t sq = a.q.col_stride(), sk = a.k.col_stride(), ss = a.state.col_stride();
    const int64_t srow0 = (slot * Hv + h) * Dk;
    for (int64_t r = b0; r < b1; ++r) {
      const uint8_t* rq = a.q.row(r * Hk + hk);
      const uint8_t* rk = a.k.row(r * Hk + hk);
      float qq = 0.0f, kk = 0.0f;
      if (a.l2_norm)
        for (int64_t i = 0; i < Dk; ++i) {
          const float qi = load_f(rq + i * sq, a.q.dtype), ki = load_f(rk + i * sk, a.k.dtype);
          qq += qi * qi;
          kk += ki * ki;
        }
      const float qf = (a.l2_norm ? 1.0f / sqrtf(qq + a.eps) : 1.0f) * a.scale;
      const float kf = a.l2_norm ? 1.0f / sqrtf(kk + a.eps) : 1.0f;
      const float x = load_f(a.alpha.row(r) + h * a.alpha.col_stride(), a.alpha.dtype);
      float g = x;
      if (a.decay_rate.p) {
        const float z = x + load_f(a.dt_bias.p + h * a.dt_bias.col_stride(), DType::kF32);
        g = load_f(a.decay_rate.p + h * a.decay_rate.col_stride(), DType::kF32) * (z > 20.0f ? z : log1pf(expf(z)));
      }
      const float decay = expf(g);
      const float bt = 1.0f / (1.0f + expf(fminf(-load_f(a.beta.row(r) + h * a.beta.col_stride(), a.beta.dtype), 88.0f)));
      float u = 0.0f;
      for (int64_t i = 0; i < Dk; ++i) {
        uint8_t* e = a.state.row(srow0 + i) + j * ss;
        const float sv = load_f(e, DType::kF32) * decay;
        store_f(e, DType::kF32, sv);
        u += sv * load_f(rk + i * sk, a.k.dtype) * kf;
      }
      u = (load_f(a.v.row(r * Hv + h) + j * a.v.col_stride(), a.v.dtype) - u) * bt;
      float o = 0.0f;
      for (int64_t i = 0; i < Dk; ++i) {
        uint8_t* e = a.state.row(srow0 + i) + j * ss;
        const float sv = load_f(e, DType::kF32) + load_f(rk + i * sk, a.k.dtype) * kf * u;
        store_f(e, DType::kF32, sv);
        o += sv * load_f(rq + i * sq, a.q.dtype) * qf;
      }
      store_f(a.out.row(r * Hv + h) + j * a.out.col_stride(), a.out.dtype, o);
    }
  }
};

// lora: one block per row t. Every thread finds t's segment (the last g with seg_start[g] <= t:
// empty segments before it share its start); warp w shrinks rank rows w, w + warps, ... of the
// slot's A against x into shared memory; then each thread expands output columns through B and
// adds the base row. Base-model rows (slot -1) copy the base.
struct LoraKernel {
  using Args = LoraArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
    const int64_t t = c.bx(), T = a.x.shape[0], K = a.x.cols(), N = a.base.cols(), R = a.a.shape[1];
    const int64_t G = a.seg_slot.cols(), n_slots = a.ranks.cols();
    float* h = c.template smem<1, float, kLoraMaxRank>();
    int64_t lo = 0, hi = G - 1;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (load_i32(a.seg_start, mid) <= t) lo = mid;
      else hi = mid - 1;
    }
    const int64_t slot = G > 0 ? load_i32(a.seg_slot, lo) : -1;
    int64_t r = slot >= 0 && slot < n_slots ? load_i32(a.ranks, slot) : 0;
    const bool bad = G == 0 || load_i32(a.seg_start, 0) != 0 || load_i32(a.seg_start, G) != T || slot < -1 ||
                     slot >= n_slots || load_i32(a.seg_start, lo) > t || load_i32(a.seg_start, lo + 1) <= t || r < 0 ||
                     r > R;
    if (bad) {
      if (c.tid() == 0) c.set_error(a.err, KernelError::kLoraMetadata);
      r = 0;
    }
    const int warps = c.ntid() / kWarp, lane = c.tid() % kWarp;
    const uint8_t* xr = a.x.row(t);
    for (int64_t j = c.tid() / kWarp; j < r; j += warps) {
      const uint8_t* ar = a.a.row(slot * R + j);
      float acc = 0.0f;
      for (int64_t k = lane; k < K; k += kWarp)
        acc += load_f(ar + k * a.a.col_stride(), a.a.dtype) * load_f(xr + k * a.x.col_stride(), a.x.dtype);
      acc = warp_sum(c, acc);
      if (lane == 0) h[j] = acc;
    }
    c.sync();
    const float scale = r > 0 ? load_f(a.scales.p + slot * a.scales.col_stride(), DType::kF32) : 0.0f;
    for (int64_t n = c.tid(); n < N; n += c.ntid()) {
      float acc = 0.0f;
      for (int64_t j = 0; j < r; ++j)  // B [R, N]: row j read by the block's threads side by side
        acc += load_f(a.b.row(slot * R + j) + n * a.b.col_stride(), a.b.dtype) * h[j];
      store_f(a.out.row(t) + n * a.out.col_stride(), a.out.dtype,
              load_f(a.base.row(t) + n * a.base.col_stride(), a.base.dtype) + scale * acc);
    }
  }
};

}  // namespace tessera::gpu

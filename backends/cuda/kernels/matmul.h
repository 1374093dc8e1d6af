// matmul: warp dot products over weight rows (float or int8 dp4a on quantised activations), the
// activation quantiser, and the tensor-core tile kernel.
#pragma once
#include "backends/cuda/kernels/common.h"

namespace tessera::gpu {

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
  for (int i = 0; i < 4; ++i) acc += int32_t(int8_t(uint32_t(a) >> (8 * i))) * int32_t(int8_t(uint32_t(b) >> (8 * i)));
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
    const int32_t lo = c.shfl(a0, 4 * g + q), hi = c.shfl(a1, 4 * g + q);    // A[g], A[g+8], k = 4q..
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
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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

}  // namespace tessera::gpu

// Pointwise, norm, softmax, rope and embed kernels: one block per row.
#pragma once
#include "backends/cuda/kernels/common.h"

namespace tessera::gpu {

// add, mul, scale, glu, gelu, cast, copy: one block per row, threads over the columns.
struct PointwiseKernel {
  using Args = PointwiseArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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
        case Pointwise::kAdd:
          v = x + y;
          break;
        case Pointwise::kMul:
          v = x * y;
          break;
        case Pointwise::kScale:
          v = x * a.scale;
          if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
          break;
        case Pointwise::kSiluGlu:
          v = x / (1.0f + expf(-x)) * y;
          break;
        case Pointwise::kGeluGlu:
          v = gelu_tanh(x) * y;
          break;
        case Pointwise::kGelu:
          v = gelu_erf(x);
          break;
        case Pointwise::kSigmoidGlu:
          v = y / (1.0f + expf(fminf(-x, 88.0f)));
          break;
        case Pointwise::kSwigluOai: {
          const float g = fminf(x, a.limit), u = fminf(fmaxf(y, -a.limit), a.limit);
          v = g / (1.0f + expf(fminf(-a.scale * g, 88.0f))) * (u + 1.0f);
          break;
        }
        case Pointwise::kConvert:
          break;
      }
      store_f(ro + i * so, a.out.dtype, v);
    }
  }
};

// rms_norm and layer_norm: one block per row.
struct NormKernel {
  using Args = NormArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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
        const double hi =
            fmin(double(p.n_dims - 1), ceil(p.n_dims * log(p.n_ctx_orig / (p.beta_slow * 2.0 * M_PI)) / lb));
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
    for (int64_t i = p.n_dims + c.tid(); i < D; i += c.ntid())
      store_f(ro + i * so, a.out.dtype, load_f(rx + i * sx, a.x.dtype));
  }
};

// embed: one block per token, threads over runs of 16 elements of the weight row.
template <DType W>
struct EmbedKernel {
  using Args = EmbedArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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

}  // namespace tessera::gpu

// ssm_conv and gated_delta_net, token by token.
#pragma once
#include "backends/cuda/kernels/common.h"

namespace tessera::gpu {

// ssm_conv: one thread per (sequence, channel), sliding a K-tap window down the sequence's rows
// from its state row and writing the last K-1 inputs back.
struct SsmConvKernel {
  using Args = SsmConvArgs;
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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
  template <class C>
  TS_KFN static void run(C& c, const Args& a) {
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
      const float bt =
          1.0f / (1.0f + expf(fminf(-load_f(a.beta.row(r) + h * a.beta.col_stride(), a.beta.dtype), 88.0f)));
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

}  // namespace tessera::gpu

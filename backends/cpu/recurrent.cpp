// ssm_conv and gated_delta_net: the recurrent layers of hybrid models (core/op.h). Each sequence
// reads its state row, runs its rows in order and writes the row back; sequences run in parallel
// with channel chunks (conv) or value heads (delta rule). The delta rule runs token by token: one
// pass over the [Dk, Dv] state decays it and reads it at k, a second writes k u^T and reads it at q.
// NOTE: prefill runs the same per-token recurrence; a chunked (WY) form that turns a chunk's
// tokens into matrix products is the next step for long prompts.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/reference/reference.h"

namespace tessera::cpu {

namespace {
constexpr int64_t kConvChunk = 256;  // channels per work item

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
    float* win = thread_scratch(0, K * kConvChunk);  // the last K inputs of the chunk, oldest first
    float* res = thread_scratch(1, kConvChunk);
    float* row = thread_scratch(2, C);
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t s = item / n_chunks, c0 = (item % n_chunks) * kConvChunk, nc = std::min(kConvChunk, C - c0);
      const int64_t a = ref::load_i32(qs, s), b = ref::load_i32(qs, s + 1), slot = ref::load_i32(slots, s);
      for (int64_t j = 0; j < K - 1; ++j) std::copy_n(f32_ptr(st, {slot, j, c0}), nc, win + j * kConvChunk);
      for (int64_t r = a; r < b; ++r) {
        load_chunk(x, r, c0, nc, win + (K - 1) * kConvChunk, row);
        for (int64_t c = 0; c < nc; ++c) {
          const float* tap = f32_ptr(w, {c0 + c, 0});
          float acc = 0.0f;
          for (int64_t j = 0; j < K; ++j) acc += tap[j] * win[j * kConvChunk + c];
          res[c] = silu ? acc * sigmoidf(acc) : acc;
        }
        from_f32(out.dtype, res, static_cast<char*>(out.host_data()) + out.row_offset(r) + c0 * dtype_traits(out.dtype).block_bytes, nc);
        std::copy(win + kConvChunk, win + K * kConvChunk, win);  // slide by one row
      }
      for (int64_t j = 0; j < K - 1; ++j) std::copy_n(win + j * kConvChunk, nc, f32_ptr(st, {slot, j, c0}));
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
  if (!last_dim_dense(st)) return Unimplemented("cpu: gated_delta_net needs the state dense in its last dim");
  const auto& p = n.param<GatedDeltaNetParams>();
  const int64_t Hk = q.shape[1], Dk = q.shape[2], Hv = v.shape[1], Dv = v.shape[2], S = slots.shape[0];
  const bool gated = g.has_input(n, in::kGdnDecayRate);
  std::vector<float> A(static_cast<size_t>(Hv)), dt(static_cast<size_t>(Hv));
  if (gated) {
    std::copy_n(load_row_f32(g.input_tensor(n, in::kGdnDecayRate), 0, A.data()), Hv, A.data());
    std::copy_n(load_row_f32(g.input_tensor(n, in::kGdnDtBias), 0, dt.data()), Hv, dt.data());
  }
  const float scale = p.q_scale > 0.0f ? p.q_scale : float(1.0 / std::sqrt(double(Dk)));
  pool.parallel_for_dynamic(S * Hv, 1, [&](int64_t i0, int64_t i1, int) {
    float* qn = thread_scratch(0, Dk);
    float* kn = thread_scratch(1, Dk);
    float* u = thread_scratch(2, Dv);
    float* vs = thread_scratch(3, Dv);
    float* res = thread_scratch(4, Dv);
    float* ab = thread_scratch(5, Hv);
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t s = item / Hv, h = item % Hv, hk = p.tiled_heads ? h % Hk : h / (Hv / Hk);
      const int64_t a = ref::load_i32(qs, s), b = ref::load_i32(qs, s + 1), slot = ref::load_i32(slots, s);
      for (int64_t r = a; r < b; ++r) {
        auto normalised = [&](const Tensor& t, float* dst, float mul) {
          const float* src = load_row_f32(t, r * Hk + hk, dst);
          float ss = 0.0f;
          for (int64_t i = 0; i < Dk; ++i) ss += src[i] * src[i];
          const float f = (p.l2_norm ? 1.0f / std::sqrt(ss + p.eps) : 1.0f) * mul;
          for (int64_t i = 0; i < Dk; ++i) dst[i] = src[i] * f;
        };
        normalised(q, qn, scale);
        normalised(k, kn, 1.0f);
        const float* vr = load_row_f32(v, r * Hv + h, vs);
        const float x = load_row_f32(alpha, r, ab)[h];
        const float decay = std::exp(gated ? A[size_t(h)] * softplusf(x + dt[size_t(h)]) : x);
        const float bt = sigmoidf(load_row_f32(beta, r, ab)[h]);
        std::fill_n(u, Dv, 0.0f);
        for (int64_t i = 0; i < Dk; ++i) {
          float* srow = f32_ptr(st, {slot, h, i, 0});
          const float ki = kn[i];
          for (int64_t j = 0; j < Dv; ++j) {
            srow[j] *= decay;
            u[j] += srow[j] * ki;
          }
        }
        for (int64_t j = 0; j < Dv; ++j) u[j] = (vr[j] - u[j]) * bt;
        float* o = out_row_f32(out, r * Hv + h, res);
        std::fill_n(o, Dv, 0.0f);
        for (int64_t i = 0; i < Dk; ++i) {
          float* srow = f32_ptr(st, {slot, h, i, 0});
          const float ki = kn[i], qi = qn[i];
          for (int64_t j = 0; j < Dv; ++j) {
            srow[j] += ki * u[j];
            o[j] += srow[j] * qi;
          }
        }
        finish_row_f32(out, r * Hv + h, o);
      }
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu

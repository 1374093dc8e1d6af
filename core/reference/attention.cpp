// Reference paged attention: store the new K/V in their slots, then GQA attention of every
// query row over its sequence's cached keys (causal: up to its own position; else all of them),
// read through the block table; an optional per-head sink logit joins each softmax denominator.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/reference/reference.h"

namespace tessera::ref {

Status check_attention_metadata(const Graph& g, const Node& n) {
  const Tensor& q = g.input_tensor(n, in::kAttnQ);
  const Tensor& kc = g.input_tensor(n, in::kAttnKCache);
  const Tensor& slots = g.input_tensor(n, in::kAttnSlotMapping);
  const Tensor& qs = g.input_tensor(n, in::kAttnQueryStart);
  const Tensor& sl = g.input_tensor(n, in::kAttnSeqLens);
  const Tensor& bt = g.input_tensor(n, in::kAttnBlockTables);
  const int64_t T = q.shape[0], S = sl.shape[0], n_blocks = kc.shape[0], bs = kc.shape[1];
  const int64_t n_slots = n_blocks * bs, max_blocks = bt.shape[1];
  auto err = [](const std::string& m) { return InvalidArgument("attention: " + m); };
  if (load_i32(qs, 0) != 0) return err("query_start[0] must be 0");
  if (load_i32(qs, S) != T) return err("query_start[S] = " + std::to_string(load_i32(qs, S)) + " != T = " + std::to_string(T));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t a = load_i32(qs, s), b = load_i32(qs, s + 1), len = load_i32(sl, s);
    if (b < a) return err("query_start decreases at sequence " + std::to_string(s));
    if (len < b - a) return err("seq_lens[" + std::to_string(s) + "] = " + std::to_string(len) + " < its " + std::to_string(b - a) + " new tokens");
    if ((len + bs - 1) / bs > max_blocks) return err("seq_lens[" + std::to_string(s) + "] needs more blocks than block_tables has");
    for (int64_t j = 0; j < (len + bs - 1) / bs; ++j) {
      const int32_t blk = load_i32(bt, s * max_blocks + j);
      if (blk < 0 || blk >= n_blocks)
        return err("block_tables[" + std::to_string(s) + ", " + std::to_string(j) + "] = " + std::to_string(blk) +
                   " outside [0, " + std::to_string(n_blocks) + ")");
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    const int32_t slot = load_i32(slots, t);
    if (slot >= n_slots || slot < -1)
      return err("slot_mapping[" + std::to_string(t) + "] = " + std::to_string(slot) + " outside [-1, " + std::to_string(n_slots) + ")");
  }
  return OkStatus();
}

Status attention(const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(check_attention_metadata(g, n));
  const Tensor& q = g.input_tensor(n, in::kAttnQ);
  const Tensor& k = g.input_tensor(n, in::kAttnK);
  const Tensor& v = g.input_tensor(n, in::kAttnV);
  const Tensor& kc = g.input_tensor(n, in::kAttnKCache);
  const Tensor& vc = g.input_tensor(n, in::kAttnVCache);
  const Tensor& slots = g.input_tensor(n, in::kAttnSlotMapping);
  const Tensor& qs = g.input_tensor(n, in::kAttnQueryStart);
  const Tensor& sl = g.input_tensor(n, in::kAttnSeqLens);
  const Tensor& bt = g.input_tensor(n, in::kAttnBlockTables);
  const Tensor& out = g.output_tensor(n);
  const auto& p = n.param<AttentionParams>();
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k.shape[1];
  const int64_t bs = kc.shape[1], S = sl.shape[0], max_blocks = bt.shape[1];
  const double scale = p.scale > 0.0f ? p.scale : 1.0 / std::sqrt(double(D));
  std::vector<double> sinks;
  if (g.has_input(n, in::kAttnSinks)) sinks = load_row(g.input_tensor(n, in::kAttnSinks), 0);

  // 1. Store the new K/V (cache rows are [slot, head]: flat row slot*Hkv + h).
  for (int64_t t = 0; t < T; ++t) {
    const int32_t slot = load_i32(slots, t);
    if (slot < 0) continue;
    for (int64_t h = 0; h < Hkv; ++h) {
      const auto kr = load_row(k, t * Hkv + h);
      const auto vr = load_row(v, t * Hkv + h);
      store_row(kc, int64_t(slot) * Hkv + h, kr.data());
      store_row(vc, int64_t(slot) * Hkv + h, vr.data());
    }
  }
  // 2. Attend.
  const int64_t group = Hq / Hkv;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t q0 = load_i32(qs, s), q1 = load_i32(qs, s + 1), len = load_i32(sl, s);
    const int64_t n_new = q1 - q0;
    for (int64_t i = 0; i < n_new; ++i) {
      const int64_t pos = len - n_new + i;
      const int64_t lo = p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
      const int64_t hi = p.causal ? pos : len - 1;
      for (int64_t h = 0; h < Hq; ++h) {
        const auto qr = load_row(q, (q0 + i) * Hq + h);
        const int64_t hk = h / group;
        std::vector<double> scores;
        std::vector<std::vector<double>> values;
        double mx = -INFINITY;
        for (int64_t j = lo; j <= hi; ++j) {
          const int64_t slot = int64_t(load_i32(bt, s * max_blocks + j / bs)) * bs + j % bs;
          const auto kr = load_row(kc, slot * Hkv + hk);
          double d = 0.0;
          for (int64_t c = 0; c < D; ++c) d += qr[size_t(c)] * kr[size_t(c)];
          d *= scale;
          if (p.softcap > 0.0f) d = p.softcap * std::tanh(d / p.softcap);
          scores.push_back(d);
          values.push_back(load_row(vc, slot * Hkv + hk));
          mx = std::max(mx, d);
        }
        // A sink is one more logit in the denominator, with no value row.
        if (!sinks.empty()) mx = std::max(mx, sinks[size_t(h)]);
        std::vector<double> o(size_t(D), 0.0);
        double sum = sinks.empty() ? 0.0 : std::exp(sinks[size_t(h)] - mx);
        for (size_t j = 0; j < scores.size(); ++j) {
          const double w = std::exp(scores[j] - mx);
          sum += w;
          for (int64_t c = 0; c < D; ++c) o[size_t(c)] += w * values[j][size_t(c)];
        }
        for (double& e : o) e = sum > 0.0 ? e / sum : 0.0;
        store_row(out, (q0 + i) * Hq + h, o.data());
      }
    }
  }
  return OkStatus();
}

}  // namespace tessera::ref

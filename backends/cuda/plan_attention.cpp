// Planning attention: the step's K/V into the paged cache, then attention over it, split along
// the keys (and combined) when one block per (row, head) would leave the GPU idle (plan_node.h).
#include <cmath>

#include "backends/cuda/plan_node.h"

namespace tessera::gpu {

Status plan_attention(NodePlan& p) {
  const auto& prm = p.n.param<AttentionParams>();
  const View q = p.in(in::kAttnQ), kc = p.in(in::kAttnKCache), o = p.output();
  const int64_t D = q.cols();
  if (D > kMaxHeadDimWide) return p.fail("head dim " + std::to_string(D) + " above " + std::to_string(kMaxHeadDimWide));
  if (q.shape[0] > kMaxGridX || q.shape[1] > kMaxGridY) return p.fail("too many tokens or heads for one launch");
  KvStoreArgs s{p.in(in::kAttnK),           p.in(in::kAttnV),          kc,   p.in(in::kAttnVCache),
                p.in(in::kAttnSlotMapping), kc.shape[0] * kc.shape[1], p.err};
  Launch ls = p.launch();
  ls.kind = KernelKind::kKvStore;
  ls.block = 128;
  ls.grid_x = uint32_t(q.shape[0]);
  ls.args = s;
  p.out.push_back(ls);
  AttentionArgs a{};
  a.q = q;
  a.k_cache = kc;
  a.v_cache = p.in(in::kAttnVCache);
  a.query_start = p.in(in::kAttnQueryStart);
  a.seq_lens = p.in(in::kAttnSeqLens);
  a.block_tables = p.in(in::kAttnBlockTables);
  a.sinks = p.in(in::kAttnSinks);
  a.out = o;
  a.n_seqs = a.seq_lens.shape[0];
  a.hkv = p.in(in::kAttnK).shape[1];
  a.block_size = kc.shape[1];
  a.n_blocks = kc.shape[0];
  a.scale = prm.scale > 0.0f ? prm.scale : 1.0f / std::sqrt(float(D));
  a.softcap = prm.softcap;
  a.sliding_window = prm.sliding_window;
  a.causal = prm.causal;
  a.err = p.err;
  Launch l = p.launch();
  l.kind = D > kMaxHeadDim ? KernelKind::kAttentionWide : KernelKind::kAttention;
  l.block = kAttnWarps * 32;
  a.splits = attention_splits(q.shape[0], q.shape[1], a.block_tables.cols() * a.block_size);
  if (q.shape[0] * a.splits > kMaxGridX) a.splits = 1;
  l.grid_x = uint32_t(q.shape[0] * a.splits);
  l.grid_y = uint32_t(q.shape[1]);
  if (a.splits > 1) {
    const int64_t units = q.shape[0] * q.shape[1];
    a.partial = reinterpret_cast<float*>(p.scratch.reserve(size_t(units) * size_t(a.splits) * size_t(D + 2) * 4));
  }
  l.args = a;
  p.out.push_back(l);
  if (a.splits > 1) {
    Launch lc = p.launch();
    lc.kind = KernelKind::kAttentionCombine;
    lc.block = 128;
    lc.grid_x = uint32_t(q.shape[0] * q.shape[1]);
    lc.args = AttentionCombineArgs{o, a.partial, a.splits, a.sinks};
    p.out.push_back(lc);
  }
  return OkStatus();
}

}  // namespace tessera::gpu

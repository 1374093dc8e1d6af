#include "backends/cuda/plan.h"

#include <cmath>
#include <string>

namespace tessera::gpu {

const char* kernel_error_message(KernelError e) {
  switch (e) {
    case KernelError::kNone: return "no error";
    case KernelError::kEmbedId: return "embed: a token id outside the embedding's rows";
    case KernelError::kExpertId: return "matmul_id: an expert id outside [0, experts)";
    case KernelError::kAttnMetadata:
      return "attention: query_start, seq_lens, a block table entry or a slot is out of range";
    case KernelError::kStateMetadata:
      return "ssm_conv / gated_delta_net: query_start or a state slot is out of range";
    case KernelError::kLoraMetadata:
      return "lora: a segment start, slot or rank is out of range";
  }
  return "unknown kernel error";
}

const char* kernel_name(KernelKind k) {
  switch (k) {
    case KernelKind::kPointwise: return "pointwise";
    case KernelKind::kNorm: return "norm";
    case KernelKind::kSoftmax: return "softmax";
    case KernelKind::kRope: return "rope";
    case KernelKind::kEmbed: return "embed";
    case KernelKind::kMatmul: return "matmul";
    case KernelKind::kMatmulMma: return "matmul_mma";
    case KernelKind::kMatmulId: return "matmul_id";
    case KernelKind::kTopkRoute: return "topk_route";
    case KernelKind::kKvStore: return "kv_store";
    case KernelKind::kAttention: return "attention";
    case KernelKind::kAttentionWide:
      return "attention_wide";
    case KernelKind::kQuantizeQ8: return "quantize_q8";
    case KernelKind::kAttentionCombine: return "attention_combine";
    case KernelKind::kMoeSort: return "moe_sort";
    case KernelKind::kMoeWeightedSum: return "moe_weighted_sum";
    case KernelKind::kSsmConv: return "ssm_conv";
    case KernelKind::kGatedDeltaNet: return "gated_delta_net";
    case KernelKind::kLora:
      return "lora";
  }
  return "?";
}

namespace {

bool is_act(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }
bool is_weight(DType t) {
  switch (t) {
#define TS_CASE(D) case DType::D:
    TS_FOR_EACH_WEIGHT_DTYPE(TS_CASE)
#undef TS_CASE
    return true;
    default: return false;
  }
}
bool is_kv(DType t) { return is_act(t) || t == DType::kFP8_E4M3 || t == DType::kINT8_PC; }

View view_of(const Tensor& t, const AddressOf& address) {
  View v;
  v.p = address(t);
  v.dtype = t.dtype;
  v.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) {
    v.shape[i] = t.shape[size_t(i)];
    v.stride[i] = t.stride[size_t(i)];
  }
  // Block formats keep stride 0 in the last dim (core/tensor.h); kernels never step by it.
  return v;
}

constexpr uint32_t kMaxGridY = 65535;
constexpr int64_t kMaxGridX = 2147483647;

// The quantize_q8 launch of node |ni|: x's rows (the caller checked they fit one grid) into
// runs of 16 at |xq|.
Launch quantize_q8_launch(int ni, const View& x, Q8Run* xq) {
  Launch l;
  l.node = ni;
  l.kind = KernelKind::kQuantizeQ8;
  l.grid_x = uint32_t(x.rows());
  l.block = 128;
  l.args = QuantizeQ8Args{x, xq, x.cols() / 16};
  return l;
}

}  // namespace

bool supports(OpKind op, DType act, DType weight) {
  switch (op) {
    case OpKind::kEmbed:
      return is_act(act) && is_weight(weight);
    case OpKind::kMatmul:
    case OpKind::kMatmulId:
      return is_act(act) && is_weight(weight);
    case OpKind::kAttention:
      return is_act(act) && is_kv(weight);
    case OpKind::kCast:
      return is_act(act) && is_act(weight);
    case OpKind::kSsmConv:
    case OpKind::kGatedDeltaNet:
      return is_act(act) && weight == DType::kF32;  // the state
    case OpKind::kLora:
      return is_act(act) && is_act(weight);  // the adapters' A and B
    case OpKind::kRmsNorm:
    case OpKind::kLayerNorm:
    case OpKind::kRope:
    case OpKind::kGlu:
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kSoftmax:
    case OpKind::kTopkRoute:
    case OpKind::kCopy:
    case OpKind::kGelu:
      return is_act(act) && act == weight;
    case OpKind::kView:
      return true;
    case OpKind::kCount:
      return false;
  }
  return false;
}

int attention_splits(int64_t rows, int64_t heads, int64_t capacity) {
  const int64_t units = rows * heads;
  if (units <= 0 || units >= kAttnSplitTarget || capacity < 2 * kAttnSplitKeys) return 1;
  int64_t s = capacity / kAttnSplitKeys;
  const int64_t fill = (kAttnSplitTarget + units - 1) / units;
  if (fill < s) s = fill;
  if (s > kAttnMaxSplits) s = kAttnMaxSplits;
  return int(s < 1 ? 1 : s);
}

bool matmul_uses_q8(DType weight, int64_t k) {
  switch (weight) {
#define TS_CASE(D) \
  case DType::D: return decode::kHasIntRun<DType::D> && k % 16 == 0;
    TS_FOR_EACH_WEIGHT_DTYPE(TS_CASE)
#undef TS_CASE
    default: return false;
  }
}

Status plan_node(const Graph& g, int ni, const AddressOf& address, int32_t* err, Scratch& scratch,
                 std::vector<Launch>& out) {
  const Node& n = g.nodes()[size_t(ni)];
  auto fail = [&](const std::string& why) {
    return InvalidArgument(std::string("gpu: node ") + std::to_string(ni) + " (" + op_name(n.op) + "): " + why);
  };
  auto in = [&](int i) { return g.has_input(n, i) ? view_of(g.input_tensor(n, i), address) : View{}; };
  const View o = n.op == OpKind::kView ? View{} : view_of(g.output_tensor(n), address);
  auto rows_grid = [&](int64_t rows, Launch& l) -> Status {
    if (rows > kMaxGridX) return fail("too many rows for one launch");
    l.grid_x = uint32_t(rows);  // 0: nothing to launch
    return OkStatus();
  };
  for (int i = 0; i < int(n.inputs.size()); ++i)
    if (g.has_input(n, i) && g.input_tensor(n, i).layout != WeightLayout::kRows)
      return fail("input " + std::to_string(i) + " is in another backend's weight layout");
  Launch l;
  l.node = ni;
  switch (n.op) {
    case OpKind::kView:
      return OkStatus();
    case OpKind::kAdd:
    case OpKind::kMul:
    case OpKind::kScale:
    case OpKind::kGlu:
    case OpKind::kGelu:
    case OpKind::kCast:
    case OpKind::kCopy: {
      PointwiseArgs a{};
      a.a = in(0);
      a.out = o;
      a.scale = 1.0f;
      switch (n.op) {
        case OpKind::kAdd: a.op = Pointwise::kAdd; a.b = in(1); break;
        case OpKind::kMul: a.op = Pointwise::kMul; a.b = in(1); break;
        case OpKind::kScale:
          a.op = Pointwise::kScale;
          a.scale = n.param<ScaleParams>().scale;
          a.softcap = n.param<ScaleParams>().softcap;
          break;
        case OpKind::kGlu:
          switch (n.param<GluParams>().kind) {
            case GluKind::kSilu: a.op = Pointwise::kSiluGlu; break;
            case GluKind::kGelu: a.op = Pointwise::kGeluGlu; break;
            case GluKind::kSigmoid: a.op = Pointwise::kSigmoidGlu; break;
            case GluKind::kSwigluOai:
              a.op = Pointwise::kSwigluOai;
              a.scale = n.param<GluParams>().alpha;
              a.limit = n.param<GluParams>().limit;
              break;
          }
          a.b = in(1);
          break;
        case OpKind::kGelu: a.op = Pointwise::kGelu; break;
        default: a.op = Pointwise::kConvert; break;
      }
      l.kind = KernelKind::kPointwise;
      TS_RETURN_IF_ERROR(rows_grid(a.out.rows(), l));
      l.args = a;
      break;
    }
    case OpKind::kRmsNorm:
    case OpKind::kLayerNorm: {
      NormArgs a{};
      a.layer = n.op == OpKind::kLayerNorm;
      a.x = in(0);
      a.w = in(1);
      if (a.layer) {
        a.b = in(in::kLayerNormB);
        a.eps = n.param<LayerNormParams>().eps;
      } else {
        a.eps = n.param<RmsNormParams>().eps;
      }
      a.out = o;
      l.kind = KernelKind::kNorm;
      TS_RETURN_IF_ERROR(rows_grid(a.out.rows(), l));
      l.args = a;
      break;
    }
    case OpKind::kSoftmax: {
      l.kind = KernelKind::kSoftmax;
      l.args = SoftmaxArgs{in(0), o, n.param<SoftmaxParams>().scale};
      TS_RETURN_IF_ERROR(rows_grid(o.rows(), l));
      break;
    }
    case OpKind::kRope: {
      const auto& p = n.param<RopeParams>();
      RopeArgs a{};
      a.x = in(in::kRopeX);
      a.pos = in(in::kRopePos);
      a.freq = in(in::kRopeFreqFactors);
      a.out = o;
      if (a.x.rank != 3) return fail("rope takes [T, H, D]");
      a.p = p;
      l.kind = KernelKind::kRope;
      l.block = 64;
      TS_RETURN_IF_ERROR(rows_grid(a.x.rows(), l));
      l.args = a;
      break;
    }
    case OpKind::kEmbed: {
      EmbedArgs a{in(in::kEmbedWeight), in(in::kEmbedIds), o, err};
      l.kind = KernelKind::kEmbed;
      l.weight = a.w.dtype;
      TS_RETURN_IF_ERROR(rows_grid(a.ids.shape[0], l));
      l.args = a;
      break;
    }
    case OpKind::kMatmul: {
      MatmulArgs a{in(in::kMatmulX), in(in::kMatmulW), in(in::kMatmulBias), o};
      l.kind = KernelKind::kMatmul;
      l.weight = a.w.dtype;
      l.block = kMatmulWarps * 32;
      const int64_t gx = (a.w.shape[0] + kMatmulWarps - 1) / kMatmulWarps;
      const int64_t gy = (a.x.rows() + kMatmulRows - 1) / kMatmulRows;
      if (gy > kMaxGridY || gx > kMaxGridX) return fail("matmul too large for one launch");
      l.grid_x = uint32_t(gx);
      l.grid_y = uint32_t(gy);
      const int64_t K = a.x.cols(), M = a.x.rows();
      if (matmul_uses_q8(a.w.dtype, K) && M > 0) {
        if (M > kMaxGridX) return fail("too many rows for one launch");
        auto* xq = reinterpret_cast<Q8Run*>(scratch.reserve(size_t(M) * size_t(K / 16) * sizeof(Q8Run)));
        out.push_back(quantize_q8_launch(ni, a.x, xq));
        a.xq = xq;
        if (M >= kMmaMinRows) {  // prefill: tiles on the tensor cores
          l.kind = KernelKind::kMatmulMma;
          l.block = kMmaWarps * 32;
          l.grid_x = uint32_t((a.w.shape[0] + kMmaTile - 1) / kMmaTile);
          l.grid_y = uint32_t((M + kMmaTile - 1) / kMmaTile);
        }
      }
      l.args = a;
      break;
    }
    case OpKind::kMatmulId: {
      MatmulIdArgs a{in(in::kMatmulIdX),   in(in::kMatmulIdW), in(in::kMatmulIdIds), in(in::kMatmulIdWeights), o, err,
                     in(in::kMatmulIdBias)};
      const int64_t E = a.w.shape[0], N = a.w.shape[1], K = a.w.cols(), T = a.ids.shape[0], k = a.ids.cols();
      const int64_t P = T * k, X = a.x.rows();
      const bool q8 = matmul_uses_q8(a.w.dtype, K) && X > 0;
      // Scratch: order [P] and offsets [E + 2] (int32), then the quantised x, then y [P, N].
      auto align16 = [](size_t b) { return (b + 15) / 16 * 16; };
      const size_t order_at = 0, offsets_at = align16(size_t(P) * 4);
      const size_t xq_at = align16(offsets_at + size_t(E + 2) * 4);
      const size_t y_at = align16(xq_at + (q8 ? size_t(X) * size_t(K / 16) * sizeof(Q8Run) : 0));
      const size_t total = y_at + (a.weights.p ? size_t(P) * size_t(N) * 4 : 0);
      if (P == 0) {  // no pairs: with routing weights each token's sum over no slots is zero
        l.kind = KernelKind::kMoeWeightedSum;
        l.grid_x = a.weights.p ? uint32_t(T) : 0;
        l.args = MoeWeightedSumArgs{a.weights, o, nullptr};
        break;
      }
      uint8_t* base = scratch.reserve(total);
      auto at = [&](size_t off) { return base ? base + off : nullptr; };
      auto* order = reinterpret_cast<int32_t*>(at(order_at));
      auto* offsets = reinterpret_cast<int32_t*>(at(offsets_at));
      a.order = order;
      a.offsets = offsets;
      Launch ls;
      ls.node = ni;
      ls.kind = KernelKind::kMoeSort;
      ls.block = 256;
      ls.args = MoeSortArgs{a.ids, E, order, offsets, err};
      out.push_back(ls);
      if (q8) {
        if (X > kMaxGridX) return fail("too many rows for one launch");
        auto* xq = reinterpret_cast<Q8Run*>(at(xq_at));
        out.push_back(quantize_q8_launch(ni, a.x, xq));
        a.xq = xq;
      }
      if (a.weights.p) a.y = reinterpret_cast<float*>(at(y_at));
      l.kind = KernelKind::kMatmulId;
      l.weight = a.w.dtype;
      l.block = kMatmulWarps * 32;
      const int64_t gx = (N + kMatmulWarps - 1) / kMatmulWarps;
      const int64_t gy = (P + kMatmulRows - 1) / kMatmulRows + E + 1;  // tiles of every group, at most
      if (gy > kMaxGridY || gx > kMaxGridX) return fail("matmul_id too large for one launch");
      l.grid_x = uint32_t(gx);
      l.grid_y = uint32_t(gy);
      l.args = a;
      if (a.weights.p) {
        out.push_back(l);
        Launch lw;
        lw.node = ni;
        lw.kind = KernelKind::kMoeWeightedSum;
        lw.grid_x = uint32_t(T);
        lw.args = MoeWeightedSumArgs{a.weights, o, a.y};
        out.push_back(lw);
        return OkStatus();
      }
      break;
    }
    case OpKind::kTopkRoute: {
      const auto& p = n.param<TopkRouteParams>();
      TopkRouteArgs a{};
      a.logits = in(in::kRouteLogits);
      a.bias = in(in::kRouteBias);
      a.ids = view_of(g.output_tensor(n, 0), address);
      a.weights = view_of(g.output_tensor(n, 1), address);
      if (a.logits.cols() > kMaxRouteExperts) return fail("more than " + std::to_string(kMaxRouteExperts) + " experts");
      if (p.k > 64 || p.n_groups > 64) return fail("k or n_groups above 64");
      a.p = p;
      l.kind = KernelKind::kTopkRoute;
      l.block = 64;
      l.grid_x = uint32_t((a.logits.rows() + 63) / 64);
      l.args = a;
      break;
    }
    case OpKind::kAttention: {
      const auto& p = n.param<AttentionParams>();
      const View q = in(in::kAttnQ), kc = in(in::kAttnKCache);
      const int64_t D = q.cols();
      if (D > kMaxHeadDimWide)
        return fail("head dim " + std::to_string(D) + " above " + std::to_string(kMaxHeadDimWide));
      if (q.shape[0] > kMaxGridX || q.shape[1] > kMaxGridY) return fail("too many tokens or heads for one launch");
      KvStoreArgs s{in(in::kAttnK), in(in::kAttnV), kc, in(in::kAttnVCache), in(in::kAttnSlotMapping),
                    kc.shape[0] * kc.shape[1], err};
      Launch ls;
      ls.node = ni;
      ls.kind = KernelKind::kKvStore;
      ls.block = 128;
      ls.grid_x = uint32_t(q.shape[0]);
      ls.args = s;
      out.push_back(ls);
      AttentionArgs a{};
      a.q = q;
      a.k_cache = kc;
      a.v_cache = in(in::kAttnVCache);
      a.query_start = in(in::kAttnQueryStart);
      a.seq_lens = in(in::kAttnSeqLens);
      a.block_tables = in(in::kAttnBlockTables);
      a.sinks = in(in::kAttnSinks);
      a.out = o;
      a.n_seqs = a.seq_lens.shape[0];
      a.hkv = in(in::kAttnK).shape[1];
      a.block_size = kc.shape[1];
      a.n_blocks = kc.shape[0];
      a.scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(D));
      a.softcap = p.softcap;
      a.sliding_window = p.sliding_window;
      a.causal = p.causal;
      a.err = err;
      l.kind = D > kMaxHeadDim ? KernelKind::kAttentionWide : KernelKind::kAttention;
      l.block = kAttnWarps * 32;
      a.splits = attention_splits(q.shape[0], q.shape[1], a.block_tables.cols() * a.block_size);
      if (q.shape[0] * a.splits > kMaxGridX) a.splits = 1;
      l.grid_x = uint32_t(q.shape[0] * a.splits);
      l.grid_y = uint32_t(q.shape[1]);
      if (a.splits > 1) {
        const int64_t units = q.shape[0] * q.shape[1];
        a.partial = reinterpret_cast<float*>(scratch.reserve(size_t(units) * size_t(a.splits) * size_t(D + 2) * 4));
        l.args = a;
        out.push_back(l);
        Launch lc;
        lc.node = ni;
        lc.kind = KernelKind::kAttentionCombine;
        lc.block = 128;
        lc.grid_x = uint32_t(units);
        lc.args = AttentionCombineArgs{o, a.partial, a.splits, a.sinks};
        out.push_back(lc);
        return OkStatus();
      }
      l.args = a;
      break;
    }
    case OpKind::kSsmConv: {
      SsmConvArgs a{};
      a.x = in(in::kConvX);
      a.w = in(in::kConvW);
      a.state = in(in::kConvState);
      a.query_start = in(in::kConvQueryStart);
      a.slots = in(in::kConvSlots);
      a.out = o;
      a.n_seqs = a.slots.cols();
      a.silu = n.param<SsmConvParams>().silu ? 1 : 0;
      a.err = err;
      if (a.w.cols() > kMaxConvTaps) return fail("more than " + std::to_string(kMaxConvTaps) + " conv taps");
      l.kind = KernelKind::kSsmConv;
      l.block = 128;
      const int64_t blocks = (a.n_seqs * a.x.cols() + 127) / 128;
      if (blocks > kMaxGridX) return fail("too many channels for one launch");
      l.grid_x = uint32_t(blocks);
      l.args = a;
      break;
    }
    case OpKind::kGatedDeltaNet: {
      const auto& p = n.param<GatedDeltaNetParams>();
      GatedDeltaNetArgs a{};
      a.q = in(in::kGdnQ);
      a.k = in(in::kGdnK);
      a.v = in(in::kGdnV);
      a.alpha = in(in::kGdnAlpha);
      a.beta = in(in::kGdnBeta);
      a.decay_rate = in(in::kGdnDecayRate);
      a.dt_bias = in(in::kGdnDtBias);
      a.state = in(in::kGdnState);
      a.query_start = in(in::kGdnQueryStart);
      a.slots = in(in::kGdnSlots);
      a.out = o;
      a.n_seqs = a.slots.cols();
      a.scale = p.q_scale > 0.0f ? p.q_scale : float(1.0 / std::sqrt(double(a.q.shape[2])));
      a.eps = p.eps;
      a.l2_norm = p.l2_norm ? 1 : 0;
      a.tiled_heads = p.tiled_heads ? 1 : 0;
      a.err = err;
      l.kind = KernelKind::kGatedDeltaNet;
      l.block = 128;
      const int64_t blocks = (a.n_seqs * a.v.shape[1] * a.v.shape[2] + 127) / 128;
      if (blocks > kMaxGridX) return fail("too many heads for one launch");
      l.grid_x = uint32_t(blocks);
      l.args = a;
      break;
    }
    case OpKind::kLora: {
      LoraArgs a{};
      a.x = in(in::kLoraX);
      a.base = in(in::kLoraBase);
      a.a = in(in::kLoraA);
      a.b = in(in::kLoraB);
      a.ranks = in(in::kLoraRanks);
      a.scales = in(in::kLoraScales);
      a.seg_start = in(in::kLoraSegStart);
      a.seg_slot = in(in::kLoraSegSlot);
      a.out = o;
      a.err = err;
      l.kind = KernelKind::kLora;
      l.block = 128;
      TS_RETURN_IF_ERROR(rows_grid(a.x.shape[0], l));
      l.args = a;
      break;
    }
    case OpKind::kCount:
      return fail("not an op");
  }
  out.push_back(l);
  return OkStatus();
}

Result<std::vector<Launch>> plan_graph(const Graph& graph, const AddressOf& address, int32_t* err, Scratch& scratch) {
  std::vector<Launch> out;
  out.reserve(graph.nodes().size() + 4);
  for (int i = 0; i < int(graph.nodes().size()); ++i)
    TS_RETURN_IF_ERROR(plan_node(graph, i, address, err, scratch, out));
  return out;
}

}  // namespace tessera::gpu

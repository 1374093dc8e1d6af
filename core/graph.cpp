#include "core/graph.h"

#include <cmath>

namespace tessera {

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kEmbed: return "embed";
    case OpKind::kMatmul: return "matmul";
    case OpKind::kMatmulId: return "matmul_id";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kRope: return "rope";
    case OpKind::kAttention: return "attention";
    case OpKind::kGlu: return "glu";
    case OpKind::kAdd: return "add";
    case OpKind::kMul: return "mul";
    case OpKind::kScale: return "scale";
    case OpKind::kSoftmax: return "softmax";
    case OpKind::kTopkRoute: return "topk_route";
    case OpKind::kCast: return "cast";
    case OpKind::kCopy: return "copy";
    case OpKind::kView: return "view";
    case OpKind::kLayerNorm: return "layer_norm";
    case OpKind::kGelu: return "gelu";
    case OpKind::kSsmConv: return "ssm_conv";
    case OpKind::kGatedDeltaNet: return "gated_delta_net";
    case OpKind::kLora:
      return "lora";
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kCount: break;
  }
  return "unknown";
}

namespace {
bool is_act(DType t) { return dtype_traits(t).is_float; }
// KV caches may also hold 8-bit rows with an f32 scale per (token, kv head) row.
bool is_kv_quant(DType t) { return t == DType::kFP8_E4M3 || t == DType::kINT8_PC; }
std::string desc(const Tensor& t) { return t.shape_string(); }
}  // namespace

bool Graph::check(bool cond, OpKind op, const std::string& what) {
  if (!cond && status_.ok()) status_ = InvalidArgument(std::string(op_name(op)) + ": " + what);
  return cond;
}

ValueId Graph::new_value(Tensor t, Value::Kind kind, int32_t producer) {
  Value v;
  v.kind = kind;
  v.tensor = std::move(t);
  v.producer = producer;
  values_.push_back(std::move(v));
  return ValueId(values_.size() - 1);
}

ValueId Graph::input(const Tensor& t) {
  if (!t.buffer && status_.ok())
    status_ = InvalidArgument("input: tensor '" + t.name + "' " + desc(t) + " has no buffer");
  return new_value(t, Value::Kind::kExternal, -1);
}

ValueId Graph::add_node(OpKind op, std::vector<ValueId> inputs, Tensor out, OpParams params) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.params = std::move(params);
  const int32_t idx = int32_t(nodes_.size());
  n.outputs.push_back(new_value(std::move(out), Value::Kind::kIntermediate, idx));
  nodes_.push_back(std::move(n));
  return nodes_.back().outputs[0];
}

ValueId Graph::embed(ValueId weight, ValueId ids, DType out_dtype) {
  const OpKind op = OpKind::kEmbed;
  if (!status_.ok() || !check(valid(weight) && valid(ids), op, "invalid value id")) return kNoValue;
  const Tensor& w = tensor(weight);
  const Tensor& i = tensor(ids);
  if (!check(w.rank == 2, op, "weight must be 2-D, got " + desc(w)) ||
      !check(i.rank == 1 && i.dtype == DType::kI32, op, "ids must be 1-D i32, got " + desc(i)) ||
      !check(is_act(out_dtype), op, std::string("output dtype must be f32/f16/bf16, got ") + dtype_name(out_dtype)))
    return kNoValue;
  return add_node(op, {weight, ids}, Tensor::make(out_dtype, {i.shape[0], w.shape[1]}), NoParams{});
}

ValueId Graph::matmul(ValueId x, ValueId w, ValueId bias) {
  const OpKind op = OpKind::kMatmul;
  if (!status_.ok() || !check(valid(x) && valid(w) && (bias == kNoValue || valid(bias)), op, "invalid value id"))
    return kNoValue;
  const Tensor& a = tensor(x);
  const Tensor& b = tensor(w);
  if (!check(a.rank >= 1 && is_act(a.dtype), op, "x must be f32/f16/bf16, got " + desc(a)) ||
      !check(b.rank == 2, op, "w must be 2-D [N, K], got " + desc(b)) ||
      !check(a.cols() == b.shape[1], op, "K mismatch: x " + desc(a) + " vs w " + desc(b)) ||
      !check(dtype_row_check(b.dtype, b.shape[1]).empty(), op, dtype_row_check(b.dtype, b.shape[1])))
    return kNoValue;
  if (bias != kNoValue) {
    const Tensor& c = tensor(bias);
    if (!check(c.rank == 1 && c.shape[0] == b.shape[0] && is_act(c.dtype), op,
               "bias must be [N] float, got " + desc(c) + " for w " + desc(b)))
      return kNoValue;
  }
  Tensor out = a;
  out.buffer.reset();
  out.offset = 0;
  out.name.clear();
  out.shape[size_t(a.rank - 1)] = b.shape[0];
  out.set_contiguous_strides();
  return add_node(op, {x, w, bias}, std::move(out), NoParams{});
}

ValueId Graph::matmul_id(ValueId x, ValueId w, ValueId ids, ValueId weights, ValueId bias) {
  const OpKind op = OpKind::kMatmulId;
  if (!status_.ok() || !check(valid(x) && valid(w) && valid(ids) && (weights == kNoValue || valid(weights)) &&
                                  (bias == kNoValue || valid(bias)),
                              op, "invalid value id"))
    return kNoValue;
  const Tensor& a = tensor(x);
  const Tensor& b = tensor(w);
  const Tensor& r = tensor(ids);
  if (!check(b.rank == 3, op, "w must be 3-D [E, N, K], got " + desc(b)) ||
      !check(r.rank == 2 && r.dtype == DType::kI32, op, "ids must be [T, k] i32, got " + desc(r)) ||
      !check(is_act(a.dtype) && (a.rank == 2 || a.rank == 3), op, "x must be [T, K] or [T, k, K] float, got " + desc(a)) ||
      !check(a.shape[0] == r.shape[0], op, "T mismatch: x " + desc(a) + " ids " + desc(r)) ||
      !check(a.rank == 2 || a.shape[1] == r.shape[1], op, "k mismatch: x " + desc(a) + " ids " + desc(r)) ||
      !check(a.cols() == b.shape[2], op, "K mismatch: x " + desc(a) + " vs w " + desc(b)) ||
      !check(dtype_row_check(b.dtype, b.shape[2]).empty(), op, dtype_row_check(b.dtype, b.shape[2])))
    return kNoValue;
  const int64_t T = r.shape[0], k = r.shape[1], N = b.shape[1];
  if (bias != kNoValue) {
    const Tensor& bb = tensor(bias);
    if (!check(bb.rank == 2 && is_act(bb.dtype) && bb.shape[0] == b.shape[0] && bb.shape[1] == N && bb.is_contiguous(),
               op,
               "bias must be contiguous [E, N] = [" + std::to_string(b.shape[0]) + ", " + std::to_string(N) +
                   "] float, got " + desc(bb)))
      return kNoValue;
  }
  if (weights != kNoValue) {
    const Tensor& wt = tensor(weights);
    if (!check(wt.dtype == DType::kF32 && wt.rank == 2 && wt.shape[0] == T && wt.shape[1] == k, op,
               "weights must be [T, k] f32 like ids " + desc(r) + ", got " + desc(wt)))
      return kNoValue;
    return add_node(op, {x, w, ids, weights, bias}, Tensor::make(a.dtype, {T, N}), NoParams{});
  }
  return add_node(op, {x, w, ids, kNoValue, bias}, Tensor::make(a.dtype, {T, k, N}), NoParams{});
}

ValueId Graph::rms_norm(ValueId x, ValueId w, float eps) {
  const OpKind op = OpKind::kRmsNorm;
  if (!status_.ok() || !check(valid(x) && (w == kNoValue || valid(w)), op, "invalid value id")) return kNoValue;
  const Tensor& a = tensor(x);
  if (!check(a.rank >= 1 && is_act(a.dtype), op, "x must be float, got " + desc(a)) ||
      !check(eps > 0.0f && std::isfinite(eps), op, "eps must be positive, got " + std::to_string(eps)))
    return kNoValue;
  if (w != kNoValue) {
    const Tensor& g = tensor(w);
    if (!check(g.rank == 1 && g.shape[0] == a.cols() && is_act(g.dtype), op,
               "w must be [" + std::to_string(a.cols()) + "] float, got " + desc(g)))
      return kNoValue;
  }
  return add_node(op, {x, w}, Tensor::make(a.dtype, a.rank, a.shape.data()), RmsNormParams{eps});
}

ValueId Graph::layer_norm(ValueId x, ValueId w, ValueId b, float eps) {
  const OpKind op = OpKind::kLayerNorm;
  if (!status_.ok() || !check(valid(x) && (w == kNoValue || valid(w)) && (b == kNoValue || valid(b)), op,
                              "invalid value id"))
    return kNoValue;
  const Tensor& a = tensor(x);
  if (!check(a.rank >= 1 && is_act(a.dtype), op, "x must be float, got " + desc(a)) ||
      !check(eps > 0.0f && std::isfinite(eps), op, "eps must be positive, got " + std::to_string(eps)))
    return kNoValue;
  for (ValueId p : {w, b}) {
    if (p == kNoValue) continue;
    const Tensor& g = tensor(p);
    if (!check(g.rank == 1 && g.shape[0] == a.cols() && is_act(g.dtype), op,
               std::string(p == w ? "w" : "b") + " must be [" + std::to_string(a.cols()) + "] float, got " + desc(g)))
      return kNoValue;
  }
  return add_node(op, {x, w, b}, Tensor::make(a.dtype, a.rank, a.shape.data()), LayerNormParams{eps});
}

ValueId Graph::gelu(ValueId x) {
  const OpKind op = OpKind::kGelu;
  if (!status_.ok() || !check(valid(x), op, "invalid value id")) return kNoValue;
  const Tensor& a = tensor(x);
  if (!check(is_act(a.dtype) && a.rank >= 1, op, "x must be float, got " + desc(a))) return kNoValue;
  return add_node(op, {x}, Tensor::make(a.dtype, a.rank, a.shape.data()), NoParams{});
}

ValueId Graph::all_reduce(ValueId x) {
  const OpKind op = OpKind::kAllReduce;
  if (!status_.ok() || !check(valid(x), op, "invalid value id")) return kNoValue;
  const Tensor& a = tensor(x);
  if (!check(is_act(a.dtype) && a.is_contiguous(), op, "x must be contiguous float, got " + desc(a))) return kNoValue;
  return add_node(op, {x}, Tensor::make(a.dtype, a.rank, a.shape.data()), NoParams{});
}

ValueId Graph::rope(ValueId x, ValueId positions, const RopeParams& p, ValueId freq_factors) {
  const OpKind op = OpKind::kRope;
  if (!status_.ok() || !check(valid(x) && valid(positions) && (freq_factors == kNoValue || valid(freq_factors)),
                              op, "invalid value id"))
    return kNoValue;
  const Tensor& a = tensor(x);
  const Tensor& pos = tensor(positions);
  if (!check(a.rank == 3 && is_act(a.dtype), op, "x must be [T, H, D] float, got " + desc(a)) ||
      !check(pos.rank == 1 && pos.dtype == DType::kI32 && pos.shape[0] == a.shape[0], op,
             "positions must be [T] i32 matching x " + desc(a) + ", got " + desc(pos)) ||
      !check(p.n_dims > 0 && p.n_dims % 2 == 0 && p.n_dims <= a.shape[2], op,
             "n_dims must be even and in (0, head_dim], got " + std::to_string(p.n_dims)) ||
      !check(p.freq_base > 0.0f && p.freq_scale > 0.0f, op, "freq_base and freq_scale must be positive"))
    return kNoValue;
  if (freq_factors != kNoValue) {
    const Tensor& f = tensor(freq_factors);
    if (!check(f.rank == 1 && f.dtype == DType::kF32 && f.shape[0] >= p.n_dims / 2, op,
               "freq_factors must be [n_dims/2] f32, got " + desc(f)))
      return kNoValue;
  }
  return add_node(op, {x, positions, freq_factors}, Tensor::make(a.dtype, a.rank, a.shape.data()), p);
}

ValueId Graph::attention(const AttentionInputs& in, const AttentionParams& p) {
  const OpKind op = OpKind::kAttention;
  const ValueId ids[] = {in.q, in.k, in.v, in.k_cache, in.v_cache, in.slot_mapping, in.query_start,
                         in.seq_lens, in.block_tables};
  if (!status_.ok()) return kNoValue;
  for (ValueId v : ids)
    if (!check(valid(v), op, "invalid value id")) return kNoValue;
  const Tensor& q = tensor(in.q);
  const Tensor& k = tensor(in.k);
  const Tensor& v = tensor(in.v);
  const Tensor& kc = tensor(in.k_cache);
  const Tensor& vc = tensor(in.v_cache);
  const Tensor& slots = tensor(in.slot_mapping);
  const Tensor& qs = tensor(in.query_start);
  const Tensor& sl = tensor(in.seq_lens);
  const Tensor& bt = tensor(in.block_tables);
  const bool i32s = slots.dtype == DType::kI32 && qs.dtype == DType::kI32 && sl.dtype == DType::kI32 &&
                    bt.dtype == DType::kI32;
  if (!check(q.rank == 3 && k.rank == 3 && v.rank == 3, op, "q, k, v must be [T, H, D]") ||
      !check(is_act(q.dtype) && k.dtype == q.dtype && v.dtype == q.dtype, op, "q, k, v must share a float dtype") ||
      !check(k.same_shape(v) && k.shape[0] == q.shape[0] && k.shape[2] == q.shape[2], op,
             "k/v shape " + desc(k) + " does not match q " + desc(q)) ||
      !check(k.shape[1] > 0 && q.shape[1] % k.shape[1] == 0, op,
             "q heads " + std::to_string(q.shape[1]) + " not a multiple of kv heads " + std::to_string(k.shape[1])) ||
      !check(kc.rank == 4 && kc.same_shape(vc) && kc.shape[2] == k.shape[1] && kc.shape[3] == k.shape[2], op,
             "cache must be [blocks, block_size, kv_heads, head_dim] matching k, got " + desc(kc)) ||
      !check((is_act(kc.dtype) || is_kv_quant(kc.dtype)) && vc.dtype == kc.dtype, op,
             "cache dtype must be f32/f16/bf16/fp8_e4m3/int8_pc, got " + desc(kc)) ||
      !check(dtype_row_check(kc.dtype, kc.shape[3]).empty(), op, dtype_row_check(kc.dtype, kc.shape[3])) ||
      !check(i32s, op, "slot_mapping, query_start, seq_lens, block_tables must be i32") ||
      !check(slots.rank == 1 && slots.shape[0] == q.shape[0], op, "slot_mapping must be [T]") ||
      !check(sl.rank == 1 && qs.rank == 1 && qs.shape[0] == sl.shape[0] + 1, op,
             "query_start must be [S+1] and seq_lens [S], got " + desc(qs) + " and " + desc(sl)) ||
      !check(bt.rank == 2 && bt.shape[0] == sl.shape[0], op, "block_tables must be [S, max_blocks], got " + desc(bt)) ||
      !check(p.sliding_window >= 0 && p.softcap >= 0.0f, op, "sliding_window and softcap must be >= 0") ||
      !check(p.causal || p.sliding_window == 0, op, "a sliding window needs causal attention"))
    return kNoValue;
  std::vector<ValueId> inputs(ids, ids + 9);
  inputs.push_back(in.sinks);
  if (in.sinks != kNoValue) {
    if (!check(valid(in.sinks), op, "invalid sinks value id")) return kNoValue;
    const Tensor& sk = tensor(in.sinks);
    if (!check(sk.rank == 1 && sk.dtype == DType::kF32 && sk.shape[0] == q.shape[1] && sk.is_contiguous(), op,
               "sinks must be contiguous [Hq] = [" + std::to_string(q.shape[1]) + "] f32, got " + desc(sk)))
      return kNoValue;
  }
  return add_node(op, std::move(inputs), Tensor::make(q.dtype, q.rank, q.shape.data()), p);
}

ValueId Graph::glu(ValueId gate, ValueId up, GluKind kind) { return glu(gate, up, GluParams{kind}); }

ValueId Graph::glu(ValueId gate, ValueId up, const GluParams& p) {
  const OpKind op = OpKind::kGlu;
  if (!status_.ok() || !check(valid(gate) && valid(up), op, "invalid value id")) return kNoValue;
  const Tensor& g = tensor(gate);
  const Tensor& u = tensor(up);
  if (!check(is_act(g.dtype) && g.dtype == u.dtype && g.same_shape(u), op,
             "gate " + desc(g) + " and up " + desc(u) + " must match"))
    return kNoValue;
  if (!check(p.kind != GluKind::kSwigluOai || (p.limit > 0.0f && std::isfinite(p.alpha)), op,
             "swiglu_oai needs limit > 0 and a finite alpha"))
    return kNoValue;
  return add_node(op, {gate, up}, Tensor::make(g.dtype, g.rank, g.shape.data()), p);
}

ValueId Graph::binary(OpKind op, ValueId a, ValueId b) {
  if (!status_.ok() || !check(valid(a) && valid(b), op, "invalid value id")) return kNoValue;
  const Tensor& x = tensor(a);
  const Tensor& y = tensor(b);
  bool suffix = y.rank <= x.rank && y.rank >= 1;
  for (int i = 0; suffix && i < y.rank; ++i) suffix = y.shape[size_t(y.rank - 1 - i)] == x.shape[size_t(x.rank - 1 - i)];
  if (!check(is_act(x.dtype) && is_act(y.dtype), op, "operands must be float: " + desc(x) + ", " + desc(y)) ||
      !check(suffix, op, "b " + desc(y) + " must match the trailing dims of a " + desc(x)))
    return kNoValue;
  return add_node(op, {a, b}, Tensor::make(x.dtype, x.rank, x.shape.data()), NoParams{});
}
ValueId Graph::add(ValueId a, ValueId b) { return binary(OpKind::kAdd, a, b); }
ValueId Graph::mul(ValueId a, ValueId b) { return binary(OpKind::kMul, a, b); }

ValueId Graph::scale(ValueId x, float s, float softcap) {
  const OpKind op = OpKind::kScale;
  if (!status_.ok() || !check(valid(x), op, "invalid value id")) return kNoValue;
  const Tensor& a = tensor(x);
  if (!check(is_act(a.dtype), op, "x must be float, got " + desc(a)) ||
      !check(softcap >= 0.0f && std::isfinite(softcap), op,
             "softcap must be finite and >= 0, got " + std::to_string(softcap)))
    return kNoValue;
  return add_node(op, {x}, Tensor::make(a.dtype, a.rank, a.shape.data()), ScaleParams{s, softcap});
}

ValueId Graph::softmax(ValueId x, float scale) {
  const OpKind op = OpKind::kSoftmax;
  if (!status_.ok() || !check(valid(x), op, "invalid value id")) return kNoValue;
  const Tensor& a = tensor(x);
  if (!check(is_act(a.dtype) && a.rank >= 1, op, "x must be float, got " + desc(a))) return kNoValue;
  return add_node(op, {x}, Tensor::make(a.dtype, a.rank, a.shape.data()), SoftmaxParams{scale});
}

std::pair<ValueId, ValueId> Graph::topk_route(ValueId logits, const TopkRouteParams& p, ValueId bias) {
  const OpKind op = OpKind::kTopkRoute;
  if (!status_.ok() || !check(valid(logits) && (bias == kNoValue || valid(bias)), op, "invalid value id"))
    return {kNoValue, kNoValue};
  const Tensor& l = tensor(logits);
  if (!check(l.rank == 2 && is_act(l.dtype), op, "logits must be [T, E] float, got " + desc(l)))
    return {kNoValue, kNoValue};
  // |l| points into values_, which add_node below may reallocate: keep the sizes by value.
  const int64_t T = l.shape[0], E = l.shape[1];
  if (!check(p.k >= 1 && p.k <= E, op, "k=" + std::to_string(p.k) + " must be in [1, " + std::to_string(E) + "]") ||
      !check(p.n_groups >= 1 && E % p.n_groups == 0 && p.topk_groups >= 1 && p.topk_groups <= p.n_groups, op,
             "bad expert groups: n_groups=" + std::to_string(p.n_groups) + " topk_groups=" + std::to_string(p.topk_groups)) ||
      !check(p.k <= E / p.n_groups * p.topk_groups, op, "k exceeds the experts in the kept groups"))
    return {kNoValue, kNoValue};
  if (bias != kNoValue) {
    const Tensor& b = tensor(bias);
    if (!check(b.rank == 1 && b.shape[0] == E && b.dtype == DType::kF32, op, "bias must be [E] f32, got " + desc(b)))
      return {kNoValue, kNoValue};
  }
  const ValueId ids = add_node(op, {logits, bias}, Tensor::make(DType::kI32, {T, p.k}), p);
  const ValueId w = new_value(Tensor::make(DType::kF32, {T, p.k}), Value::Kind::kIntermediate,
                              int32_t(nodes_.size() - 1));
  nodes_.back().outputs.push_back(w);
  return {ids, w};
}

ValueId Graph::cast(ValueId x, DType to) {
  const OpKind op = OpKind::kCast;
  if (!status_.ok() || !check(valid(x), op, "invalid value id")) return kNoValue;
  const Tensor& a = tensor(x);
  if (!check(is_act(a.dtype) && is_act(to), op,
             std::string("cast supports f32/f16/bf16, got ") + dtype_name(a.dtype) + " -> " + dtype_name(to)))
    return kNoValue;
  return add_node(op, {x}, Tensor::make(to, a.rank, a.shape.data()), CastParams{to});
}

ValueId Graph::copy(ValueId x) {
  const OpKind op = OpKind::kCopy;
  if (!status_.ok() || !check(valid(x), op, "invalid value id")) return kNoValue;
  const Tensor& a = tensor(x);
  if (!check(!dtype_traits(a.dtype).is_quantized, op, "copy of block-format tensors is not supported: " + desc(a)))
    return kNoValue;
  return add_node(op, {x}, Tensor::make(a.dtype, a.rank, a.shape.data()), NoParams{});
}

ValueId Graph::view(ValueId x, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> stride,
                    int64_t byte_offset) {
  const OpKind op = OpKind::kView;
  if (!status_.ok() || !check(valid(x), op, "invalid value id")) return kNoValue;
  if (!check(shape.size() == stride.size() && shape.size() >= 1 && shape.size() <= kMaxDims, op,
             "shape and stride must have the same rank (1..4)") ||
      !check(byte_offset >= 0, op, "negative byte offset"))
    return kNoValue;
  const Tensor& a = tensor(x);
  Tensor t;
  t.dtype = a.dtype;
  t.rank = int(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[size_t(i++)] = s;
  i = 0;
  for (int64_t s : stride) t.stride[size_t(i++)] = s;
  // Bounds: the last byte the view can touch must lie inside x's extent.
  int64_t extent_a = a.row_bytes();
  for (int d = 0; d < a.rank - 1; ++d) extent_a += (a.shape[size_t(d)] - 1) * a.stride[size_t(d)];
  int64_t extent_v = byte_offset + t.row_bytes();
  if (dtype_traits(t.dtype).is_quantized) {
    for (int d = 0; d < t.rank - 1; ++d) extent_v += (t.shape[size_t(d)] - 1) * t.stride[size_t(d)];
  } else {
    extent_v = byte_offset + dtype_traits(t.dtype).block_bytes;
    for (int d = 0; d < t.rank; ++d) extent_v += (t.shape[size_t(d)] - 1) * t.stride[size_t(d)];
  }
  if (!check(extent_v <= extent_a, op, "view " + desc(t) + " at offset " + std::to_string(byte_offset) +
                                           " reaches byte " + std::to_string(extent_v) + " past " + desc(a) +
                                           " (" + std::to_string(extent_a) + " bytes)"))
    return kNoValue;
  // The view's base is always a non-view value, so aliasing is one level deep.
  ValueId base = x;
  int64_t off = byte_offset;
  if (value(x).kind == Value::Kind::kView) {
    base = value(x).view_base;
    off += value(x).view_offset;
  }
  return alias(base, t, off);
}

ValueId Graph::reshape(ValueId x, std::initializer_list<int64_t> shape) {
  const OpKind op = OpKind::kView;
  if (!status_.ok() || !check(valid(x), op, "invalid value id")) return kNoValue;
  const Tensor& a = tensor(x);
  Tensor t = Tensor::make(a.dtype, int(shape.size()), shape.begin());
  if (!check(a.is_contiguous(), op, "reshape needs a contiguous tensor, got " + desc(a)) ||
      !check(t.numel() == a.numel(), op, "reshape " + desc(a) + " to " + desc(t) + " changes the element count") ||
      !check(dtype_row_check(t.dtype, t.cols()).empty(), op, dtype_row_check(t.dtype, t.cols())))
    return kNoValue;
  switch (t.rank) {
    case 1: return view(x, {t.shape[0]}, {t.stride[0]}, 0);
    case 2: return view(x, {t.shape[0], t.shape[1]}, {t.stride[0], t.stride[1]}, 0);
    case 3: return view(x, {t.shape[0], t.shape[1], t.shape[2]}, {t.stride[0], t.stride[1], t.stride[2]}, 0);
    case 4:
      return view(x, {t.shape[0], t.shape[1], t.shape[2], t.shape[3]},
                  {t.stride[0], t.stride[1], t.stride[2], t.stride[3]}, 0);
    default: check(false, op, "reshape rank must be 1..4"); return kNoValue;
  }
}

ValueId Graph::clone_node(const Node& like, std::vector<ValueId> inputs, const std::vector<Tensor>& outs) {
  if (!status_.ok()) return kNoValue;
  for (ValueId v : inputs)
    if (!check(v == kNoValue || valid(v), like.op, "clone_node: invalid input value id")) return kNoValue;
  if (!check(!outs.empty(), like.op, "clone_node: no outputs")) return kNoValue;
  Node n;
  n.op = like.op;
  n.inputs = std::move(inputs);
  n.params = like.params;
  const int32_t idx = int32_t(nodes_.size());
  for (const Tensor& o : outs) {
    Tensor t = o;
    t.buffer = nullptr;
    t.offset = 0;
    n.outputs.push_back(new_value(std::move(t), Value::Kind::kIntermediate, idx));
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().outputs[0];
}

ValueId Graph::alias(ValueId base, const Tensor& t, int64_t byte_offset) {
  if (!status_.ok() || !check(valid(base) && value(base).kind != Value::Kind::kView, OpKind::kView,
                              "alias: the base must be a value that is not a view"))
    return kNoValue;
  Tensor a = t;
  a.buffer = nullptr;
  a.offset = 0;
  if (value(base).kind == Value::Kind::kExternal) {
    a.buffer = value(base).tensor.buffer;
    a.offset = size_t(int64_t(value(base).tensor.offset) + byte_offset);
  }
  const ValueId id = new_value(std::move(a), Value::Kind::kView, value(base).producer);
  values_[size_t(id)].view_base = base;
  values_[size_t(id)].view_offset = byte_offset;
  return id;
}

void Graph::mark_output(ValueId v) {
  if (!status_.ok()) return;
  if (!valid(v)) {
    status_ = InvalidArgument("mark_output: invalid value id");
    return;
  }
  values_[size_t(v)].is_output = true;
  if (values_[size_t(v)].kind == Value::Kind::kView) values_[size_t(values_[size_t(v)].view_base)].is_output = true;
}

ValueId Graph::ssm_conv(const SsmConvInputs& in, const SsmConvParams& p) {
  const OpKind op = OpKind::kSsmConv;
  const ValueId ids[] = {in.x, in.w, in.state, in.query_start, in.state_slots};
  if (!status_.ok()) return kNoValue;
  for (ValueId v : ids)
    if (!check(valid(v), op, "invalid value id")) return kNoValue;
  const Tensor& x = tensor(in.x);
  const Tensor& w = tensor(in.w);
  const Tensor& st = tensor(in.state);
  const Tensor& qs = tensor(in.query_start);
  const Tensor& slots = tensor(in.state_slots);
  if (!check(x.rank == 2 && is_act(x.dtype), op, "x must be [T, C] in a float dtype, got " + desc(x)) ||
      !check(w.rank == 2 && w.dtype == DType::kF32 && w.shape[0] == x.shape[1] && w.shape[1] >= 2, op,
             "w must be [C, K] f32 with K >= 2 and C = " + std::to_string(x.shape[1]) + ", got " + desc(w)) ||
      !check(st.rank == 3 && st.dtype == DType::kF32 && st.shape[1] == w.shape[1] - 1 && st.shape[2] == x.shape[1], op,
             "state must be [slots, K-1, C] f32 matching w " + desc(w) + ", got " + desc(st)) ||
      !check(qs.dtype == DType::kI32 && slots.dtype == DType::kI32 && qs.rank == 1 && slots.rank == 1 &&
                 qs.shape[0] == slots.shape[0] + 1,
             op, "query_start must be [S+1] and state_slots [S], both i32, got " + desc(qs) + " and " + desc(slots)))
    return kNoValue;
  return add_node(op, {ids, ids + 5}, Tensor::make(x.dtype, x.rank, x.shape.data()), p);
}

ValueId Graph::gated_delta_net(const GatedDeltaNetInputs& in, const GatedDeltaNetParams& p) {
  const OpKind op = OpKind::kGatedDeltaNet;
  const ValueId ids[] = {in.q, in.k, in.v, in.alpha, in.beta, in.decay_rate, in.dt_bias, in.state, in.query_start,
                         in.state_slots};
  if (!status_.ok()) return kNoValue;
  for (int i = 0; i < 10; ++i)
    if (!check(valid(ids[i]) || ((i == in::kGdnDecayRate || i == in::kGdnDtBias) && ids[i] == kNoValue), op,
               "invalid value id"))
      return kNoValue;
  const Tensor& q = tensor(in.q);
  const Tensor& k = tensor(in.k);
  const Tensor& v = tensor(in.v);
  const Tensor& a = tensor(in.alpha);
  const Tensor& b = tensor(in.beta);
  const Tensor& st = tensor(in.state);
  const Tensor& qs = tensor(in.query_start);
  const Tensor& slots = tensor(in.state_slots);
  const int64_t T = q.shape[0], Hk = q.shape[1], Dk = q.shape[2], Hv = v.shape[1], Dv = v.shape[2];
  auto head_vector = [&](ValueId id) {
    if (id == kNoValue) return true;
    const Tensor& t = tensor(id);
    return t.rank == 1 && t.shape[0] == Hv && t.dtype == DType::kF32;
  };
  if (!check(q.rank == 3 && k.rank == 3 && v.rank == 3 && is_act(q.dtype) && k.dtype == q.dtype && v.dtype == q.dtype, op,
             "q, k [T, Hk, Dk] and v [T, Hv, Dv] must share a float dtype") ||
      !check(k.same_shape(q) && v.shape[0] == T && Hk > 0 && Hv % Hk == 0, op,
             "k " + desc(k) + " must match q " + desc(q) + " and v's heads " + desc(v) + " be a multiple of q's") ||
      !check(a.rank == 2 && b.rank == 2 && a.shape[0] == T && a.shape[1] == Hv && b.same_shape(a) && a.dtype == q.dtype &&
                 b.dtype == q.dtype,
             op, "alpha and beta must be [T, Hv] = [" + std::to_string(T) + ", " + std::to_string(Hv) + "] in q's dtype, got " +
                     desc(a) + " and " + desc(b)) ||
      !check(head_vector(in.decay_rate) && head_vector(in.dt_bias) && (in.decay_rate == kNoValue) == (in.dt_bias == kNoValue),
             op, "decay_rate and dt_bias must both be [Hv] f32, or both absent") ||
      !check(st.rank == 4 && st.dtype == DType::kF32 && st.shape[1] == Hv && st.shape[2] == Dk && st.shape[3] == Dv, op,
             "state must be [slots, Hv, Dk, Dv] f32, got " + desc(st)) ||
      !check(qs.dtype == DType::kI32 && slots.dtype == DType::kI32 && qs.rank == 1 && slots.rank == 1 &&
                 qs.shape[0] == slots.shape[0] + 1,
             op, "query_start must be [S+1] and state_slots [S], both i32, got " + desc(qs) + " and " + desc(slots)) ||
      !check(p.eps >= 0.0f && p.q_scale >= 0.0f, op, "eps and q_scale must be >= 0"))
    return kNoValue;
  return add_node(op, {ids, ids + 10}, Tensor::make(q.dtype, v.rank, v.shape.data()), p);
}

ValueId Graph::lora(const LoraInputs& in) {
  const OpKind op = OpKind::kLora;
  const ValueId ids[] = {in.x, in.base, in.a, in.b, in.ranks, in.scales, in.seg_start, in.seg_slot};
  if (!status_.ok()) return kNoValue;
  for (ValueId v : ids)
    if (!check(valid(v), op, "invalid value id")) return kNoValue;
  const Tensor& x = tensor(in.x);
  const Tensor& base = tensor(in.base);
  const Tensor& a = tensor(in.a);
  const Tensor& b = tensor(in.b);
  const Tensor& ranks = tensor(in.ranks);
  const Tensor& scales = tensor(in.scales);
  const Tensor& ss = tensor(in.seg_start);
  const Tensor& sl = tensor(in.seg_slot);
  if (!check(x.rank == 2 && is_act(x.dtype), op, "x must be [T, K] in a float dtype, got " + desc(x)) ||
      !check(base.rank == 2 && base.dtype == x.dtype && base.shape[0] == x.shape[0], op,
             "base must be [T, N] in x's dtype with T = " + std::to_string(x.shape[0]) + ", got " + desc(base)) ||
      !check(
          a.rank == 3 && is_act(a.dtype) && a.shape[2] == x.shape[1] && a.shape[1] >= 1 && a.shape[1] <= kLoraMaxRank,
          op,
          "a must be [slots, R, K] float with K = " + std::to_string(x.shape[1]) +
              " and 1 <= R <= " + std::to_string(kLoraMaxRank) + ", got " + desc(a)) ||
      !check(b.rank == 3 && b.dtype == a.dtype && b.shape[0] == a.shape[0] && b.shape[1] == a.shape[1] &&
                 b.shape[2] == base.shape[1],
             op,
             "b must be [slots, R, N] = [" + std::to_string(a.shape[0]) + ", " + std::to_string(a.shape[1]) + ", " +
                 std::to_string(base.shape[1]) + "] in a's dtype, got " + desc(b)) ||
      !check(ranks.rank == 1 && ranks.dtype == DType::kI32 && ranks.shape[0] == a.shape[0] && scales.rank == 1 &&
                 scales.dtype == DType::kF32 && scales.shape[0] == a.shape[0],
             op, "ranks must be [slots] i32 and scales [slots] f32, got " + desc(ranks) + " and " + desc(scales)) ||
      !check(ss.rank == 1 && sl.rank == 1 && ss.dtype == DType::kI32 && sl.dtype == DType::kI32 &&
                 ss.shape[0] == sl.shape[0] + 1,
             op, "seg_start must be [G+1] and seg_slot [G], both i32, got " + desc(ss) + " and " + desc(sl)))
    return kNoValue;
  return add_node(op, {ids, ids + 8}, Tensor::make(base.dtype, base.rank, base.shape.data()), NoParams{});
}

OpDTypes op_dtypes(const Graph& g, const Node& n) {
  const DType in0 = n.inputs.empty() || n.inputs[0] == kNoValue ? DType::kF32 : g.tensor(n.inputs[0]).dtype;
  switch (n.op) {
    case OpKind::kEmbed: return {g.output_tensor(n).dtype, in0};
    case OpKind::kMatmul:
    case OpKind::kMatmulId: return {in0, g.tensor(n.inputs[1]).dtype};
    case OpKind::kAttention: return {in0, g.tensor(n.inputs[in::kAttnKCache]).dtype};
    case OpKind::kSsmConv: return {in0, g.tensor(n.inputs[in::kConvState]).dtype};
    case OpKind::kGatedDeltaNet: return {in0, g.tensor(n.inputs[in::kGdnState]).dtype};
    case OpKind::kLora:
      return {in0, g.tensor(n.inputs[in::kLoraA]).dtype};
    case OpKind::kCast: return {in0, g.output_tensor(n).dtype};
    default: return {in0, in0};
  }
}

uint64_t Graph::shape_hash() const {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t x) { h = (h ^ x) * 1099511628211ull; };
  for (const Node& n : nodes_) {
    mix(uint64_t(n.op));
    for (ValueId v : n.inputs) {
      mix(uint64_t(int64_t(v)));
      if (v == kNoValue) continue;
      const Tensor& t = tensor(v);
      mix(uint64_t(t.dtype));
      for (int i = 0; i < t.rank; ++i) { mix(uint64_t(t.shape[size_t(i)])); mix(uint64_t(t.stride[size_t(i)])); }
    }
  }
  return h;
}

}  // namespace tessera

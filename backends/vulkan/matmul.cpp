// embed, matmul and matmul_id -> embed.comp and matmul.comp (one SPIR-V per weight format).
#include <algorithm>
#include <array>

#include "backends/vulkan/recorder.h"
#include "core/reference/reference.h"

namespace tessera::vulkan {

namespace {
constexpr uint32_t kVecWorkgroup = 64;  // matmul.comp GEMV: one output column per subgroup
constexpr int64_t kTiledMinRows = 4;  // below this the GEMV reads each weight row fewer times

// Ids the shader will index with, checked on the host when they are inputs it can read (mapped
// memory); ids produced inside the graph (topk_route) are in range by construction and the
// shaders skip any that are not.
Status check_ids(const Graph& g, ValueId v, int64_t limit, const char* op, const char* what) {
  const Value& val = g.value(v);
  if (val.kind == Value::Kind::kIntermediate || !val.tensor.host_data()) return OkStatus();
  const Tensor& ids = val.tensor;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    const int32_t id = ref::load_i32(ids, i);
    if (id < 0 || id >= limit)
      return InvalidArgument(std::string(op) + ": " + what + " " + std::to_string(id) + " at flat index " +
                             std::to_string(i) + " outside [0, " + std::to_string(limit) + ")");
  }
  return OkStatus();
}

Status check_contiguous_i32(const Tensor& t, const char* op) {
  if (!t.is_contiguous()) return Unimplemented(std::string("vulkan: ") + op + " needs contiguous ids, got " + t.shape_string());
  return OkStatus();
}

// GEMV grid: columns over workgroups of (workgroup / subgroup) subgroups, rows over y.
std::array<uint32_t, 3> vec_groups(const Recorder& rec, const MatmulParams& p) {
  const uint32_t per_group = std::max<uint32_t>(1, kVecWorkgroup / std::max<uint32_t>(1, rec.caps().subgroup_size));
  return {groups_for(p.N, per_group), groups_for(p.M, 1), 1};
}

std::string kernel(const char* family, DType w) { return std::string(family) + "_" + weight_kernel_suffix(w); }
}  // namespace

Status record_embed(Recorder& rec, const Graph& g, const Node& n) {
  constexpr uint32_t kWorkgroup = 128;
  const Tensor& w = g.input_tensor(n, in::kEmbedWeight);
  const Tensor& ids = g.input_tensor(n, in::kEmbedIds);
  const Tensor& out = g.output_tensor(n);
  TS_RETURN_IF_ERROR(check_contiguous_i32(ids, "embed"));
  TS_RETURN_IF_ERROR(check_ids(g, n.inputs[in::kEmbedIds], w.shape[0], "embed", "id"));
  EmbedParams p;
  p.w = ref_of(w);
  p.ids = address_of(ids);
  p.dst = address_of(out);
  p.T = uint32_t(ids.shape[0]);
  p.D = uint32_t(w.shape[1]);
  p.V = uint32_t(w.shape[0]);
  p.out_dtype = uint32_t(out.dtype);
  const std::string k = dtype_traits(w.dtype).is_quantized ? kernel("embed", w.dtype) : "embed_float";
  return rec.dispatch(k, {kWorkgroup}, p, {groups_for(out.numel(), kWorkgroup), 1, 1}, {span_of(w), span_of(ids)},
                      {span_of(out)});
}

Status record_matmul(Recorder& rec, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kMatmulX);
  const Tensor& w = g.input_tensor(n, in::kMatmulW);
  const Tensor& out = g.output_tensor(n);
  MatmulParams p;
  p.x = ref_of(x);
  p.w = ref_of(w);
  p.dst = address_of(out);
  p.M = uint32_t(x.rows());
  p.N = uint32_t(w.shape[0]);
  p.K = uint32_t(w.shape[1]);
  p.out_dtype = uint32_t(out.dtype);
  std::vector<Span> reads = {span_of(x), span_of(w)};
  if (g.has_input(n, in::kMatmulBias)) {
    const Tensor& b = g.input_tensor(n, in::kMatmulBias);
    if (!b.is_contiguous()) return Unimplemented("vulkan: matmul bias must be contiguous, got " + b.shape_string());
    p.bias = address_of(b);
    p.bias_dtype = uint32_t(b.dtype);
    p.flags |= kMatmulBias;
    reads.push_back(span_of(b));
  }
  if (x.rows() >= kTiledMinRows) {
    const std::array<uint32_t, 3> groups = {uint32_t((p.N + 31) / 32), uint32_t((p.M + 31) / 32), 1};
    if (groups[0] > 65535 || groups[1] > 65535) return Unimplemented("vulkan: matmul too large for one dispatch: " + x.shape_string());
    return rec.dispatch(kernel("matmul_tiled", w.dtype), {}, p, groups, reads, {span_of(out)});
  }
  return rec.dispatch(kernel("matmul_vec", w.dtype), {kVecWorkgroup}, p, vec_groups(rec, p), reads, {span_of(out)});
}

Status record_matmul_id(Recorder& rec, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kMatmulIdX);
  const Tensor& w = g.input_tensor(n, in::kMatmulIdW);
  const Tensor& ids = g.input_tensor(n, in::kMatmulIdIds);
  const Tensor& out = g.output_tensor(n);
  TS_RETURN_IF_ERROR(check_contiguous_i32(ids, "matmul_id"));
  TS_RETURN_IF_ERROR(check_ids(g, n.inputs[in::kMatmulIdIds], w.shape[0], "matmul_id", "expert id"));
  const bool weighted = g.has_input(n, in::kMatmulIdWeights);
  const int64_t T = ids.shape[0], k = ids.shape[1];
  MatmulParams p;
  p.x = ref_of(x);
  p.w = ref_of(w);
  p.ids = address_of(ids);
  p.dst = address_of(out);
  p.M = uint32_t(weighted ? T : T * k);
  p.N = uint32_t(w.shape[1]);
  p.K = uint32_t(w.shape[2]);
  p.k_slots = uint32_t(k);
  p.n_experts = uint32_t(w.shape[0]);
  p.flags = kMatmulIds | (x.rank == 3 ? kMatmulXPerSlot : 0u);
  p.out_dtype = uint32_t(out.dtype);
  std::vector<Span> reads = {span_of(x), span_of(w), span_of(ids)};
  if (weighted) {
    const Tensor& wt = g.input_tensor(n, in::kMatmulIdWeights);
    if (!wt.is_contiguous()) return Unimplemented("vulkan: matmul_id weights must be contiguous, got " + wt.shape_string());
    p.weights = address_of(wt);
    p.flags |= kMatmulWeighted;
    reads.push_back(span_of(wt));
  }
  return rec.dispatch(kernel("matmul_vec", w.dtype), {kVecWorkgroup}, p, vec_groups(rec, p), reads, {span_of(out)});
}

}  // namespace tessera::vulkan

// embed, matmul and matmul_id -> embed.comp and matmul.comp (one SPIR-V per weight format).
#include <algorithm>
#include <array>

#include "backends/vulkan/recorder.h"
#include "core/reference/reference.h"

namespace tessera::vulkan {

namespace {
constexpr uint32_t kVecWorkgroup = 64;  // matmul.comp GEMV: COLS output columns per subgroup
constexpr uint32_t kVecCols = 8;        // matmul.comp COLS
constexpr uint32_t kVecMaxRows = 8;     // the largest ROWS variant: activation rows per weight read
constexpr int64_t kTiledMinRows = 9;    // up to kVecMaxRows rows the GEMV reads the weights once

// The GEMV's ROWS specialisation for |m| rows: 1, 2, 4 or 8 (few variants, few registers).
uint32_t vec_rows(int64_t m) {
  uint32_t r = 1;
  while (r < kVecMaxRows && r < m) r *= 2;
  return r;
}

// Ids the shader will index with, checked on the host when they are inputs it can read (mapped
// memory, no queued copy pending: Recorder::host_current); ids produced inside the graph
// (topk_route) are in range by construction and the shaders skip any that are not.
Status check_ids(const Recorder& rec, const Graph& g, ValueId v, int64_t limit, const char* op, const char* what) {
  const Value& val = g.value(v);
  // NOTE: a view of a computed value (Gemma 4 reshapes topk_route's ids) is computed too.
  if (Recorder::computed_in_graph(g, v) || !rec.host_current(val.tensor)) return OkStatus();
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

// GEMV grid: COLS columns per subgroup, (workgroup / subgroup) subgroups per workgroup; row
// groups over y.
std::array<uint32_t, 3> vec_groups(const Recorder& rec, const MatmulParams& p, uint32_t rows_per_group) {
  const uint32_t per_group = kVecCols * std::max<uint32_t>(1, kVecWorkgroup / std::max<uint32_t>(1, rec.caps().subgroup_size));
  return {groups_for(p.N, per_group), groups_for(p.M, rows_per_group), 1};
}

// Sets kMatmulXF32Aligned when every row of |x| is f32, contiguous and 16-byte aligned.
void set_x_flags(const Tensor& x, MatmulParams* p) {
  bool aligned = x.dtype == DType::kF32 && x.stride[size_t(x.rank - 1)] == 4 && address_of(x) % 16 == 0;
  for (int d = 0; d + 1 < x.rank; ++d) aligned = aligned && x.stride[size_t(d)] % 16 == 0;
  if (aligned) p->flags |= kMatmulXF32Aligned;
}

// The alignment dequant.glsl's unit loads assume for weight rows: what the format keeps within a
// row, min(4, the largest power of two dividing its block size, and its row header) (2 for Q4_0's
// 18-byte blocks, 1 for MXFP4's 17, 4 for Q4_K's 144 and the FP8/INT8 rows of 4 + K bytes).
int64_t weight_alignment(DType w) {
  const DTypeTraits& t = dtype_traits(w);
  int64_t align = 4;
  while (align > 1 && (t.block_bytes % align != 0 || t.row_header_bytes % align != 0)) align /= 2;
  return align;
}

Status check_weight_alignment(const Tensor& w, const char* op) {
  const int64_t align = weight_alignment(w.dtype);
  bool ok = int64_t(address_of(w) % uint64_t(align)) == 0;
  for (int d = 0; d + 1 < w.rank; ++d) ok = ok && w.stride[size_t(d)] % align == 0;
  if (!ok)
    return Unimplemented(std::string("vulkan: ") + op + " weight " + w.shape_string() + " (" + dtype_name(w.dtype) +
                         ") at offset " + std::to_string(w.offset) + " is not " + std::to_string(align) + "-byte aligned");
  return OkStatus();
}

std::string kernel(const char* family, DType w) { return std::string(family) + "_" + weight_kernel_suffix(w); }
}  // namespace

Status record_embed(Recorder& rec, const Graph& g, const Node& n) {
  constexpr uint32_t kWorkgroup = 128;
  const Tensor& w = g.input_tensor(n, in::kEmbedWeight);
  const Tensor& ids = g.input_tensor(n, in::kEmbedIds);
  const Tensor& out = g.output_tensor(n);
  TS_RETURN_IF_ERROR(check_contiguous_i32(ids, "embed"));
  TS_RETURN_IF_ERROR(check_ids(rec, g, n.inputs[in::kEmbedIds], w.shape[0], "embed", "id"));
  EmbedParams p;
  p.w = ref_of(w);
  p.ids = address_of(ids);
  p.dst = address_of(out);
  p.T = uint32_t(ids.shape[0]);
  p.D = uint32_t(w.shape[1]);
  p.V = uint32_t(w.shape[0]);
  p.out_dtype = uint32_t(out.dtype);
  const bool blocks = dtype_traits(w.dtype).is_quantized;
  if (blocks) {
    TS_RETURN_IF_ERROR(check_weight_alignment(w, "embed"));
  }
  // Block formats take one thread per 16-element unit (embed.comp), floats one per element.
  const int64_t threads = blocks ? out.numel() / 16 : out.numel();
  return rec.dispatch(blocks ? kernel("embed", w.dtype) : "embed_float", {kWorkgroup}, p,
                      {groups_for(threads, kWorkgroup), 1, 1}, {span_of(w), span_of(ids)}, {span_of(out)});
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
  set_x_flags(x, &p);
  TS_RETURN_IF_ERROR(check_weight_alignment(w, "matmul"));
  std::vector<Span> reads = {span_of(x), span_of(w)};
  if (g.has_input(n, in::kMatmulBias)) {
    const Tensor& b = g.input_tensor(n, in::kMatmulBias);
    if (!b.is_contiguous()) return Unimplemented("vulkan: matmul bias must be contiguous, got " + b.shape_string());
    p.bias = address_of(b);
    p.bias_dtype = uint32_t(b.dtype);
    p.flags |= kMatmulBias;
    reads.push_back(span_of(b));
  }
  if (x.rows() >= kTiledMinRows && rec.caps().tiled_gemm) {
    const std::array<uint32_t, 3> groups = {uint32_t((p.N + 63) / 64), uint32_t((p.M + 31) / 32), 1};
    if (groups[0] > 65535 || groups[1] > 65535) return Unimplemented("vulkan: matmul too large for one dispatch: " + x.shape_string());
    return rec.dispatch(kernel("matmul_tiled", w.dtype), {}, p, groups, reads, {span_of(out)});
  }
  const uint32_t rows = vec_rows(p.M);
  return rec.dispatch(kernel("matmul_vec", w.dtype), {kVecWorkgroup, rows}, p, vec_groups(rec, p, rows), reads,
                      {span_of(out)});
}

Status record_matmul_id(Recorder& rec, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, in::kMatmulIdX);
  const Tensor& w = g.input_tensor(n, in::kMatmulIdW);
  const Tensor& ids = g.input_tensor(n, in::kMatmulIdIds);
  const Tensor& out = g.output_tensor(n);
  TS_RETURN_IF_ERROR(check_contiguous_i32(ids, "matmul_id"));
  TS_RETURN_IF_ERROR(check_ids(rec, g, n.inputs[in::kMatmulIdIds], w.shape[0], "matmul_id", "expert id"));
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
  set_x_flags(x, &p);
  TS_RETURN_IF_ERROR(check_weight_alignment(w, "matmul_id"));
  std::vector<Span> reads = {span_of(x), span_of(w), span_of(ids)};
  if (weighted) {
    const Tensor& wt = g.input_tensor(n, in::kMatmulIdWeights);
    if (!wt.is_contiguous()) return Unimplemented("vulkan: matmul_id weights must be contiguous, got " + wt.shape_string());
    p.weights = address_of(wt);
    p.flags |= kMatmulWeighted;
    reads.push_back(span_of(wt));
  }
  if (g.has_input(n, in::kMatmulIdBias)) {  // [E, N], contiguous (checked by the graph builder)
    const Tensor& b = g.input_tensor(n, in::kMatmulIdBias);
    p.bias = address_of(b);
    p.bias_dtype = uint32_t(b.dtype);
    p.flags |= kMatmulBias;
    reads.push_back(span_of(b));
  }
  return rec.dispatch(kernel("matmul_vec", w.dtype), {kVecWorkgroup, 1}, p, vec_groups(rec, p, 1), reads,
                      {span_of(out)});
}

}  // namespace tessera::vulkan

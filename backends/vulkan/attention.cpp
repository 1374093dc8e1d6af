// attention -> attention.comp: stage 0 stores the new K/V into their cache slots, a barrier, then
// stage 1 attends over the block tables. Float caches share one pair of kernels (the dtype is a
// param); each 8-bit cache format (FP8 E4M3, INT8_PC: a row per slot and kv head) has its own.
// The metadata is validated on the host with the reference's own check whenever it is readable
// there (mapped memory, not produced in-graph); the shader bounds-checks every slot and block id
// regardless.
#include <cmath>

#include "backends/vulkan/recorder.h"
#include "core/reference/reference.h"

namespace tessera::vulkan {

namespace {
constexpr uint32_t kWorkgroup = 64;
// attention.comp's MAX_D (shared memory for q): 256, or 512 for wider heads (Gemma 4's global
// layers) in a pipeline of their own. Each thread keeps PER_THREAD (8) output dims: 512 / 64.
constexpr uint32_t kMaxHeadDim = 512;
static_assert(kMaxHeadDim <= 8 * kWorkgroup, "attention.comp: PER_THREAD (8) dims per thread must cover MAX_D");

// The kernel-name suffix of a cache dtype (the KVTYPE variants of CMakeLists.txt).
Result<std::string> cache_suffix(DType d) {
  switch (d) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return std::string();
    case DType::kFP8_E4M3: return std::string("_fp8_e4m3");
    case DType::kINT8_PC: return std::string("_int8_pc");
    default: return Unimplemented(std::string("vulkan: attention with a ") + dtype_name(d) + " KV cache");
  }
}

// The 8-bit rows ([f32 scale][codes]) are read and written a 4-byte word at a time.
Status check_cache_alignment(const Tensor& c) {
  if (!dtype_traits(c.dtype).is_quantized) return OkStatus();
  bool ok = address_of(c) % 4 == 0;
  for (int d = 0; d + 1 < c.rank; ++d) ok = ok && c.stride[size_t(d)] % 4 == 0;
  if (!ok)
    return Unimplemented("vulkan: attention " + std::string(dtype_name(c.dtype)) + " cache " + c.shape_string() +
                         " at offset " + std::to_string(c.offset) + " is not 4-byte aligned");
  return OkStatus();
}
}  // namespace

Status record_attention(Recorder& rec, const Graph& g, const Node& n) {
  const Tensor& q = g.input_tensor(n, in::kAttnQ);
  const Tensor& k = g.input_tensor(n, in::kAttnK);
  const Tensor& v = g.input_tensor(n, in::kAttnV);
  const Tensor& kc = g.input_tensor(n, in::kAttnKCache);
  const Tensor& vc = g.input_tensor(n, in::kAttnVCache);
  const Tensor& out = g.output_tensor(n);
  const auto& ap = n.param<AttentionParams>();
  const int meta[] = {in::kAttnSlotMapping, in::kAttnQueryStart, in::kAttnSeqLens, in::kAttnBlockTables};
  bool readable = true;
  for (int i : meta) {
    if (!g.input_tensor(n, i).is_contiguous())
      return Unimplemented("vulkan: attention metadata must be contiguous, got " + g.input_tensor(n, i).shape_string());
    readable = readable && rec.host_checkable(g, n, i);
  }
  if (readable) TS_RETURN_IF_ERROR(ref::check_attention_metadata(g, n));
  const int64_t T = q.shape[0], Hq = q.shape[1], D = q.shape[2], Hkv = k.shape[1];
  if (D > kMaxHeadDim) return Unimplemented("vulkan: attention head_dim " + std::to_string(D) + " > " + std::to_string(kMaxHeadDim));
  if (T > 65535 || Hq > 65535) return Unimplemented("vulkan: attention over " + q.shape_string() + " exceeds one dispatch");
  TS_ASSIGN_OR_RETURN(const std::string suffix, cache_suffix(kc.dtype));
  TS_RETURN_IF_ERROR(check_cache_alignment(kc));
  TS_RETURN_IF_ERROR(check_cache_alignment(vc));

  AttnParams p;
  p.q = ref_of(q);
  p.k = ref_of(k);
  p.v = ref_of(v);
  p.kc = ref_of(kc);
  p.vc = ref_of(vc);
  p.slots = address_of(g.input_tensor(n, in::kAttnSlotMapping));
  p.query_start = address_of(g.input_tensor(n, in::kAttnQueryStart));
  p.seq_lens = address_of(g.input_tensor(n, in::kAttnSeqLens));
  p.tables = address_of(g.input_tensor(n, in::kAttnBlockTables));
  p.dst = address_of(out);
  p.T = uint32_t(T);
  p.Hq = uint32_t(Hq);
  p.Hkv = uint32_t(Hkv);
  p.D = uint32_t(D);
  p.block_size = uint32_t(kc.shape[1]);
  p.n_blocks = uint32_t(kc.shape[0]);
  p.S = uint32_t(g.input_tensor(n, in::kAttnSeqLens).shape[0]);
  p.max_blocks = uint32_t(g.input_tensor(n, in::kAttnBlockTables).shape[1]);
  p.scale = ap.scale > 0.0f ? ap.scale : float(1.0 / std::sqrt(double(D)));
  p.softcap = ap.softcap;
  p.window = ap.sliding_window;
  p.causal = ap.causal ? 1u : 0u;
  p.out_dtype = uint32_t(out.dtype);
  const bool has_sinks = g.has_input(n, in::kAttnSinks);
  if (has_sinks) p.sinks = address_of(g.input_tensor(n, in::kAttnSinks));

  std::vector<Span> meta_spans;
  for (int i : meta) meta_spans.push_back(span_of(g.input_tensor(n, i)));
  std::vector<Span> store_reads = {span_of(k), span_of(v), meta_spans[0]};
  // Float caches: a thread per element; 8-bit ones: a thread per row of K or V (its absmax first).
  const int64_t store_threads = suffix.empty() ? T * Hkv * D : 2 * T * Hkv;
  TS_RETURN_IF_ERROR(rec.dispatch("attention_store" + suffix, {kWorkgroup}, p,
                                  {groups_for(store_threads, kWorkgroup), 1, 1}, store_reads,
                                  {span_of(kc), span_of(vc)}));
  std::vector<Span> reads = meta_spans;
  for (const Tensor* t : {&q, &kc, &vc}) reads.push_back(span_of(*t));
  if (has_sinks) reads.push_back(span_of(g.input_tensor(n, in::kAttnSinks)));
  const uint32_t max_d = D > 256 ? kMaxHeadDim : 256;
  return rec.dispatch("attention" + suffix, {kWorkgroup, max_d}, p, {uint32_t(T), uint32_t(Hq), 1}, reads,
                      {span_of(out)});
}

}  // namespace tessera::vulkan

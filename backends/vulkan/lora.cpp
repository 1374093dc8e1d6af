// lora -> lora.comp: one workgroup per row (shrink by subgroups, expand by threads). The
// segment table and ranks are validated on the host with the reference's own check whenever they
// are readable there; the shader leaves a row's delta out when its metadata is out of range.
#include "backends/vulkan/recorder.h"
#include "core/reference/reference.h"

namespace tessera::vulkan {

namespace {
constexpr uint32_t kWorkgroup = 64;
}  // namespace

Status record_lora(Recorder& rec, const Graph& g, const Node& n) {
  for (int i : {in::kLoraRanks, in::kLoraScales, in::kLoraSegStart, in::kLoraSegSlot})
    if (!g.input_tensor(n, i).is_contiguous()) return Unimplemented("vulkan: lora metadata must be contiguous");
  if (rec.host_checkable(g, n, in::kLoraSegStart) && rec.host_checkable(g, n, in::kLoraSegSlot) &&
      rec.host_checkable(g, n, in::kLoraRanks))
    TS_RETURN_IF_ERROR(ref::check_lora_metadata(g, n));
  const Tensor& x = g.input_tensor(n, in::kLoraX);
  const Tensor& base = g.input_tensor(n, in::kLoraBase);
  const Tensor& a = g.input_tensor(n, in::kLoraA);
  const Tensor& b = g.input_tensor(n, in::kLoraB);
  const Tensor& ranks = g.input_tensor(n, in::kLoraRanks);
  const Tensor& scales = g.input_tensor(n, in::kLoraScales);
  const Tensor& ss = g.input_tensor(n, in::kLoraSegStart);
  const Tensor& sl = g.input_tensor(n, in::kLoraSegSlot);
  const Tensor& out = g.output_tensor(n);
  LoraParams p;
  p.x = ref_of(x);
  p.base = ref_of(base);
  p.a = ref_of(a);
  p.b = ref_of(b);
  p.ranks = address_of(ranks);
  p.scales = address_of(scales);
  p.seg_start = address_of(ss);
  p.seg_slot = address_of(sl);
  p.dst = address_of(out);
  p.T = uint32_t(x.shape[0]);
  p.K = uint32_t(x.shape[1]);
  p.N = uint32_t(base.shape[1]);
  p.R = uint32_t(a.shape[1]);
  p.G = uint32_t(sl.shape[0]);
  p.n_slots = uint32_t(ranks.shape[0]);
  p.out_dtype = uint32_t(out.dtype);
  return rec.dispatch(
      "lora", {kWorkgroup}, p, {groups_for(x.shape[0], 1), 1, 1},
      {span_of(x), span_of(base), span_of(a), span_of(b), span_of(ranks), span_of(scales), span_of(ss), span_of(sl)},
      {span_of(out)});
}

}  // namespace tessera::vulkan

// add, mul, scale, swiglu/geglu/sigmoid glu/swiglu_oai, gelu, cast, copy -> elementwise.comp (OP is a specialisation
// constant).
#include "backends/vulkan/recorder.h"

namespace tessera::vulkan {

namespace {
constexpr uint32_t kWorkgroup = 256;
enum EltOp : uint32_t {
  kOpAdd = 0,
  kOpMul,
  kOpScale,
  kOpSiluGlu,
  kOpGeluGlu,
  kOpConvert,
  kOpGeluErf,
  kOpSigmoidGlu,
  kOpSwigluOai
};

EltOp elt_op(const Node& n) {
  switch (n.op) {
    case OpKind::kAdd: return kOpAdd;
    case OpKind::kMul: return kOpMul;
    case OpKind::kScale: return kOpScale;
    case OpKind::kGelu: return kOpGeluErf;
    case OpKind::kGlu:
      switch (n.param<GluParams>().kind) {
        case GluKind::kSilu: return kOpSiluGlu;
        case GluKind::kGelu: return kOpGeluGlu;
        case GluKind::kSigmoid: return kOpSigmoidGlu;
        case GluKind::kSwigluOai:
          return kOpSwigluOai;
      }
      return kOpSiluGlu;
    default: return kOpConvert;
  }
}
}  // namespace

Status record_elementwise(Recorder& rec, const Graph& g, const Node& n) {
  const Tensor& a = g.input_tensor(n, 0);
  const Tensor& out = g.output_tensor(n);
  const EltOp op = elt_op(n);
  EltParams p;
  p.a = ref_of(a);
  p.b = p.a;
  p.dst = address_of(out);
  p.rows = uint32_t(a.rows());
  p.cols = uint32_t(a.cols());
  p.out_dtype = uint32_t(out.dtype);
  std::vector<Span> reads = {span_of(a)};
  if (n.op == OpKind::kAdd || n.op == OpKind::kMul || n.op == OpKind::kGlu) {
    const Tensor& b = g.input_tensor(n, 1);
    p.b = ref_of(b);
    p.b_rows = uint32_t(b.rows());  // add/mul: b broadcasts over a's leading rows
    reads.push_back(span_of(b));
  }
  if (n.op == OpKind::kScale) {
    p.scale = n.param<ScaleParams>().scale;
    p.softcap = n.param<ScaleParams>().softcap;
  }
  if (op == kOpSwigluOai) {
    p.scale = n.param<GluParams>().alpha;
    p.limit = n.param<GluParams>().limit;
  }
  const int64_t count = a.numel();
  if (count >= (int64_t(1) << 32)) return Unimplemented("vulkan: elementwise over more than 2^32 elements: " + a.shape_string());
  return rec.dispatch("elementwise", {kWorkgroup, uint32_t(op)}, p, {groups_for(count, kWorkgroup), 1, 1}, reads,
                      {span_of(out)});
}

}  // namespace tessera::vulkan

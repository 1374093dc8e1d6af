// Calibration: a Device decorator that keeps every named weight's matmul input alive through
// compute() and folds X^T X into that weight's H (see calibrate.h).
#include "models/quantize/calibrate.h"

#include <algorithm>

#include "models/mapped_file.h"
#include "models/model.h"
#include "models/scoring.h"

namespace tessera {

namespace {

class CalibratingDevice final : public Device {
 public:
  CalibratingDevice(DevicePtr inner, CalibrationStats* stats) : inner_(std::move(inner)), stats_(stats) {}

  const DeviceInfo& info() const override { return inner_->info(); }
  Result<BufferPtr> alloc(size_t bytes, MemoryKind kind = MemoryKind::kDevice) override { return inner_->alloc(bytes, kind); }
  MemoryInfo memory() const override { return inner_->memory(); }
  Status upload(const Tensor& dst, const void* src, size_t bytes) override { return inner_->upload(dst, src, bytes); }
  Status download(const Tensor& src, void* dst, size_t bytes) override { return inner_->download(src, dst, bytes); }
  Result<Event> copy(std::span<const CopyRegion> regions) override { return inner_->copy(regions); }
  bool supports(OpKind op, DType act, DType weight) const override { return inner_->supports(op, act, weight); }
  Result<ExecutablePtr> prepare(Graph& graph) override { return inner_->prepare(graph); }
  Result<Event> submit(Executable& exe) override { return inner_->submit(exe); }
  Status wait(Event event) override { return inner_->wait(event); }
  Status synchronize() override { return inner_->synchronize(); }
  Result<BufferPtr> map_host(const void* ptr, size_t bytes, std::shared_ptr<const void> keepalive) override {
    return inner_->map_host(ptr, bytes, std::move(keepalive));
  }

  Status compute(Graph& graph) override;
  // Synchronous: the activations are read on the host as soon as the graph has run.
  Result<Event> compute_async(Graph& graph) override {
    TS_RETURN_IF_ERROR(compute(graph));
    return Event{};
  }

 private:
  // The activations of one compute(): each matmul input read by named weights, with those names.
  struct Input {
    ValueId x;
    std::vector<std::string> weights;
  };
  Status accumulate(const std::vector<float>& x, int64_t rows, int64_t k, Hessian* h);
  Hessian* hessian_for(const std::vector<std::string>& weights, int64_t k);

  DevicePtr inner_;
  CalibrationStats* stats_;
};

Status CalibratingDevice::compute(Graph& graph) {
  std::vector<Input> inputs;
  for (const Node& n : graph.nodes()) {
    if (n.op != OpKind::kMatmul) continue;
    const ValueId x = n.inputs[in::kMatmulX];
    const Value& w = graph.value(n.inputs[in::kMatmulW]);
    if (w.kind != Value::Kind::kExternal || w.tensor.name.empty() || w.tensor.rank != 2) continue;
    auto it = std::find_if(inputs.begin(), inputs.end(), [x](const Input& i) { return i.x == x; });
    if (it == inputs.end()) it = inputs.insert(inputs.end(), Input{x, {}});
    it->weights.push_back(w.tensor.name);
  }
  for (const Input& i : inputs) graph.mark_output(i.x);
  TS_RETURN_IF_ERROR(inner_->compute(graph));
  // Download every input first: the X^T X products below run on the inner device and reuse its
  // arena, which holds them.
  std::vector<std::vector<float>> host(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = graph.tensor(inputs[i].x);
    if (t.dtype != DType::kF32 || !t.is_contiguous() || t.rank != 2)
      return InvalidArgument("calibration: input of '" + inputs[i].weights[0] + "' is " + t.shape_string() +
                             ", expected a contiguous 2-D f32 activation");
    host[i].resize(size_t(t.numel()));
    TS_RETURN_IF_ERROR(inner_->download(t, host[i].data(), host[i].size() * 4));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = graph.tensor(inputs[i].x);
    TS_RETURN_IF_ERROR(accumulate(host[i], t.dim(0), t.dim(1), hessian_for(inputs[i].weights, t.dim(1))));
  }
  return OkStatus();
}

Hessian* CalibratingDevice::hessian_for(const std::vector<std::string>& weights, int64_t k) {
  std::shared_ptr<Hessian> h;
  for (const std::string& w : weights) {
    auto it = stats_->by_weight.find(w);
    if (it != stats_->by_weight.end() && it->second->k == k) h = it->second;
  }
  if (!h) h = std::make_shared<Hessian>(k);
  for (const std::string& w : weights) stats_->by_weight[w] = h;
  return h.get();
}

// H += X^T X for x [rows, k], as the matmul X^T (X^T)^T on the inner device (its GEMM is far
// faster than a scalar loop at k = 1536), summed into H in double.
Status CalibratingDevice::accumulate(const std::vector<float>& x, int64_t rows, int64_t k, Hessian* h) {
  std::vector<float> xt(size_t(k * rows));  // [k, rows]
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < k; ++i) xt[size_t(i * rows + r)] = x[size_t(r * k + i)];
  Tensor t = Tensor::make(DType::kF32, {k, rows}, "calibration.xt");
  TS_ASSIGN_OR_RETURN(t.buffer, inner_->alloc(size_t(t.nbytes())));
  TS_RETURN_IF_ERROR(inner_->upload(t, xt.data(), size_t(t.nbytes())));
  Graph g;
  const ValueId v = g.input(t);
  const ValueId out = g.matmul(v, v);
  g.mark_output(out);
  TS_RETURN_IF_ERROR(g.status());
  TS_RETURN_IF_ERROR(inner_->compute(g));
  std::vector<float> xtx(size_t(k * k));
  TS_RETURN_IF_ERROR(inner_->download(g.tensor(out), xtx.data(), xtx.size() * 4));
  for (size_t i = 0; i < xtx.size(); ++i) h->h[i] += double(xtx[i]);
  h->tokens += rows;
  return OkStatus();
}

Result<std::string> read_text(const std::string& path) {
  Result<std::string> r = read_file(path);
  if (!r.ok()) return InvalidArgument(path + ": cannot open the calibration text (" + r.status().message() + ")");
  std::string s = std::move(*r);
  if (s.empty()) return InvalidArgument(path + ": the calibration text is empty");
  return s;
}

}  // namespace

DevicePtr make_calibrating_device(DevicePtr inner, CalibrationStats* stats) {
  return std::make_shared<CalibratingDevice>(std::move(inner), stats);
}

Result<CalibrationStats> collect_calibration(const std::string& model_path, DevicePtr device,
                                             const std::string& text_path, const CalibrationOptions& o) {
  if (o.window < 2) return InvalidArgument("calibration: window of " + std::to_string(o.window) + " tokens is too small");
  TS_ASSIGN_OR_RETURN(std::string text, read_text(text_path));
  CalibrationStats stats;
  LoadOptions lo;
  lo.max_batch_tokens = o.window;
  TS_ASSIGN_OR_RETURN(auto model, Model::load(model_path, make_calibrating_device(std::move(device), &stats), lo));
  std::vector<int32_t> ids = model->tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/false);
  if (o.max_tokens > 0 && int64_t(ids.size()) > o.max_tokens) ids.resize(size_t(o.max_tokens));
  if (ids.size() < 2)
    return InvalidArgument(text_path + ": the calibration text gives " + std::to_string(ids.size()) +
                           " token(s); at least 2 are needed");
  const int64_t total = int64_t(ids.size());
  const int window = int(std::min<int64_t>(o.window, model->context_length()));
  std::vector<float> logits;
  for (int64_t start = 0; start < total; start += window) {
    const std::vector<int32_t> part(ids.begin() + start, ids.begin() + std::min<int64_t>(start + window, total));
    TS_RETURN_IF_ERROR(eval_logits(*model, part, window, &logits, DType::kF32));
    stats.tokens += int64_t(part.size());
    ++stats.windows;
    if (o.progress) o.progress(stats.tokens, total);
  }
  return stats;
}

}  // namespace tessera

// merge_lora_to_gguf: a TensorSource over the base GGUF that adds the adapter's delta to the rows
// of the weights it targets, written by the quantizer's writer with every tensor in its own format.
#include "models/lora/merge.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "models/model.h"
#include "models/quantize/quantize.h"

namespace tessera {

namespace {

// The base model's tensors, with W + scale * B A for the targeted ones.
class MergedSource : public TensorSource {
 public:
  MergedSource(std::unique_ptr<TensorSource> base, std::unordered_map<size_t, const LoraPair*> pairs, float scale)
      : base_(std::move(base)), pairs_(std::move(pairs)), scale_(scale) {}
  const std::string& path() const override { return base_->path(); }
  const std::vector<SourceTensor>& tensors() const override { return base_->tensors(); }
  const MetadataList& metadata() const override { return base_->metadata(); }
  Status read_rows(size_t index, int64_t row0, int64_t n, float* out) const override {
    TS_RETURN_IF_ERROR(base_->read_rows(index, row0, n, out));
    auto it = pairs_.find(index);
    if (it == pairs_.end()) return OkStatus();
    const LoraPair& p = *it->second;
    const int64_t K = p.cols, r = int64_t(p.a.size()) / std::max<int64_t>(p.cols, 1);
    for (int64_t i = 0; i < n; ++i) {
      float* row = out + i * K;
      const float* b = p.b.data() + (row0 + i) * r;  // lora_B [N, r]
      for (int64_t j = 0; j < r; ++j) {
        const float c = scale_ * b[j];
        const float* a = p.a.data() + j * K;  // lora_A [r, K]
        for (int64_t k = 0; k < K; ++k) row[k] += c * a[k];
      }
    }
    return OkStatus();
  }
  const void* raw_data(size_t index) const override { return pairs_.count(index) ? nullptr : base_->raw_data(index); }

 private:
  std::unique_ptr<TensorSource> base_;
  std::unordered_map<size_t, const LoraPair*> pairs_;
  float scale_;
};

}  // namespace

Result<MergeLoraStats> merge_lora_to_gguf(const std::string& model_path, const std::string& adapter_path,
                                          const std::string& out_path, DevicePtr device, const MergeLoraOptions& o) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model_path, ec))
    return InvalidArgument(model_path + ": --merge-lora needs a GGUF base model (convert a checkpoint folder first)");
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(model_path, device));
  TS_ASSIGN_OR_RETURN(int slot, model->add_lora("merge", adapter_path));
  const LoraAdapter& adapter = model->loras()[size_t(slot)];
  TS_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> base, open_gguf_source(model_path));
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < base->tensors().size(); ++i) index[base->tensors()[i].name] = i;
  std::unordered_map<size_t, const LoraPair*> pairs;
  for (const LoraTarget& t : model->lora_targets()) {
    auto m = adapter.modules.find(t.weight);
    if (m == adapter.modules.end()) continue;
    auto it = index.find(t.name);
    if (it == index.end()) return Internal(model_path + ": the adapter's tensor '" + t.name + "' is not in the file");
    const SourceTensor& s = base->tensors()[it->second];
    if (s.rows() != m->second.rows || s.cols() != m->second.cols)
      return Internal(model_path + ": '" + t.name + "' is not the shape the adapter was checked against");
    pairs[it->second] = &m->second;
  }
  // Every tensor in its own format; a merged one in its format again (f16 where it has no encoder).
  QuantizeOptions q;
  q.threads = o.threads;
  q.progress = o.progress;
  std::map<DType, int64_t> weight_elems;  // the file's main weight format, for general.file_type
  std::vector<TensorPlan> plan;
  for (size_t i = 0; i < base->tensors().size(); ++i) {
    const SourceTensor& s = base->tensors()[i];
    TensorPlan p;
    p.index = i;
    p.name = s.name;
    p.shape = s.shape;
    p.from = p.wanted = p.to = s.dtype;
    p.reason = "copied";
    if (pairs.count(i)) {
      p.reason = "LoRA merged";
      if (!dtype_traits(s.dtype).quantize_row) {
        p.to = DType::kF16;
        p.fallback = std::string(dtype_name(s.dtype)) + " has no encoder: f16";
      }
    }
    if (s.shape.size() >= 2) weight_elems[s.dtype] += s.rows() * s.cols();
    p.out_bytes = dtype_row_bytes(p.to, s.cols()) * s.rows();
    plan.push_back(std::move(p));
  }
  q.type = weight_elems.empty()
               ? DType::kF32
               : std::max_element(weight_elems.begin(), weight_elems.end(), [](const auto& a, const auto& b) {
                   return a.second < b.second;
                 })->first;
  MergeLoraStats st;
  st.merged_tensors = int(pairs.size());
  MergedSource merged(std::move(base), std::move(pairs), adapter.scale * o.scale);
  TS_ASSIGN_OR_RETURN(QuantizeStats qs, quantize_model(merged, plan, q, out_path));
  st.bytes_out = qs.bytes_out;
  return st;
}

}  // namespace tessera

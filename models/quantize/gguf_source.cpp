// The GGUF TensorSource: a mapped gguf::File, rows dequantised with the quant/ reference.
#include "models/quantize/tensor_source.h"

namespace tessera {

int64_t SourceTensor::rows() const {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

namespace {

class GgufSource final : public TensorSource {
 public:
  explicit GgufSource(std::shared_ptr<gguf::File> f) : file_(std::move(f)) {
    for (const gguf::TensorInfo& t : file_->tensors()) {
      SourceTensor s;
      s.name = t.name;
      s.dtype = t.dtype;
      s.shape.assign(t.shape.begin(), t.shape.begin() + t.rank);
      tensors_.push_back(std::move(s));
    }
    metadata_ = file_->metadata();
  }

  const std::string& path() const override { return file_->path(); }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const MetadataList& metadata() const override { return metadata_; }

  Status read_rows(size_t index, int64_t row0, int64_t n, float* out) const override {
    if (index >= tensors_.size())
      return OutOfRange(path() + ": tensor index " + std::to_string(index) + " of " + std::to_string(tensors_.size()));
    const SourceTensor& s = tensors_[index];
    const gguf::TensorInfo& ti = file_->tensors()[index];
    if (row0 < 0 || n < 0 || row0 + n > s.rows())
      return OutOfRange(path() + ": tensor '" + s.name + "': rows [" + std::to_string(row0) + ", " +
                        std::to_string(row0 + n) + ") outside its " + std::to_string(s.rows()) + " rows");
    const DTypeTraits& tr = dtype_traits(ti.dtype);
    if (!tr.dequantize_row)
      return InvalidArgument(path() + ": tensor '" + s.name + "': " + tr.name + " cannot be decoded to f32");
    const int64_t row_bytes = dtype_row_bytes(ti.dtype, s.cols());
    const auto* base = static_cast<const uint8_t*>(file_->tensor_data(ti));
    for (int64_t r = 0; r < n; ++r)
      tr.dequantize_row(base + (row0 + r) * row_bytes, out + r * s.cols(), s.cols());
    return OkStatus();
  }

  const void* raw_data(size_t index) const override {
    return index < tensors_.size() ? file_->tensor_data(file_->tensors()[index]) : nullptr;
  }

 private:
  std::shared_ptr<gguf::File> file_;
  std::vector<SourceTensor> tensors_;
  MetadataList metadata_;
};

}  // namespace

Result<std::unique_ptr<TensorSource>> open_gguf_source(const std::string& path) {
  TS_ASSIGN_OR_RETURN(auto f, gguf::File::open(path));
  return std::unique_ptr<TensorSource>(new GgufSource(std::move(f)));
}

}  // namespace tessera

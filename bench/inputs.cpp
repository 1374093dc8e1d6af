#include "bench/inputs.h"

#include <algorithm>
#include <cstring>

namespace tessera::bench {

void InputPlacer::begin_set() {
  next_image_ = 0;
  set_bytes_ = 0;
}

namespace {
// Uniform [-1, 1) values (xorshift64 seeded by |seed|), quantised to |desc|'s dtype in chunks of
// whole rows so a large weight never needs a full f32 copy.
std::vector<uint8_t> make_random_image(const Tensor& desc, uint64_t seed) {
  std::vector<uint8_t> image(size_t(desc.nbytes()));
  const int64_t cols = desc.cols(), rows = desc.rows();
  const int64_t chunk_rows = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(cols, 1));
  std::vector<float> src(size_t(chunk_rows * cols));
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  const auto& traits = dtype_traits(desc.dtype);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    for (int64_t i = 0; i < nr * cols; ++i) {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      src[size_t(i)] = float(double(state >> 11) * 0x1.0p-52 - 1.0);
    }
    uint8_t* dst = image.data() + r0 * desc.row_bytes();
    if (traits.quantize_row) {
      // Row by row: the per-channel formats (FP8, INT8_PC) start every row with its own scale.
      for (int64_t r = 0; r < nr; ++r) traits.quantize_row(src.data() + r * cols, dst + r * desc.row_bytes(), cols);
    } else {  // integer types: small values
      for (int64_t i = 0; i < nr * cols * traits.block_bytes; ++i) dst[i] = uint8_t(i * 7 % 5);
    }
  }
  return image;
}
}  // namespace

std::shared_ptr<const std::vector<uint8_t>> InputPlacer::random_image(const Tensor& desc) {
  const size_t index = next_image_++;
  if (index < images_.size() && images_[index] && int64_t(images_[index]->size()) == desc.nbytes())
    return images_[index];
  if (index >= images_.size()) images_.resize(index + 1);
  const std::string key = std::to_string(index) + " " + desc.shape_string();
  if (cache_) {
    auto it = cache_->images.find(key);
    if (it != cache_->images.end()) return images_[index] = it->second;
  }
  auto image = std::make_shared<const std::vector<uint8_t>>(make_random_image(desc, index));
  if (cache_) {
    if (cache_->bytes + image->size() > cache_->max_bytes) cache_->images.clear(), cache_->bytes = 0;
    cache_->images[key] = image;
    cache_->bytes += image->size();
  }
  return images_[index] = image;
}

Result<Tensor> InputPlacer::place(Tensor desc, const std::vector<uint8_t>& image) {
  const size_t bytes = size_t(desc.nbytes());
  const size_t aligned = (bytes + 255) / 256 * 256;
  if (slab_ && slab_used_ + aligned <= slab_->size()) {
    desc.buffer = slab_;
    desc.offset = slab_used_;
    slab_used_ += aligned;
  } else {
    TS_ASSIGN_OR_RETURN(desc.buffer, device_.alloc(std::max<size_t>(bytes, 1)));
    desc.offset = 0;
  }
  TS_RETURN_IF_ERROR(device_.upload(desc, image.data(), bytes));
  set_bytes_ += int64_t(bytes);
  total_bytes_ += int64_t(bytes);
  return desc;
}

Result<ValueId> InputPlacer::random(Graph& graph, Tensor desc) {
  const auto image = random_image(desc);
  TS_ASSIGN_OR_RETURN(Tensor t, place(desc, *image));
  return graph.input(t);
}

Result<ValueId> InputPlacer::i32(Graph& graph, Tensor desc, const std::vector<int32_t>& values) {
  if (desc.dtype != DType::kI32 || int64_t(values.size()) != desc.numel())
    return Internal("bench: i32 input " + desc.shape_string() + " given " + std::to_string(values.size()) + " values");
  std::vector<uint8_t> image(values.size() * 4);
  std::memcpy(image.data(), values.data(), image.size());
  ++next_image_;  // keep the random images aligned with call order
  TS_ASSIGN_OR_RETURN(Tensor t, place(desc, image));
  return graph.input(t);
}

}  // namespace tessera::bench

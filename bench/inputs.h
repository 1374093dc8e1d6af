// Input tensors for benchmark graphs: placed in a reusable slab of device memory where they fit
// (so a sweep does not pay first-touch page faults per kernel), else in their own allocation,
// and filled with random data from a fixed seed or given i32 values.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/graph.h"

namespace tessera::bench {

// Host images of random inputs shared across kernels (the same weight shape recurs in every
// phase), keyed by input position, dtype and shape; cleared when it grows past |max_bytes|.
struct ImageCache {
  std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>> images;
  size_t bytes = 0;
  size_t max_bytes = size_t(1) << 30;
};

class InputPlacer {
 public:
  // |slab| may be null (every tensor gets its own allocation); |cache| may be null.
  InputPlacer(Device& device, BufferPtr slab, ImageCache* cache = nullptr)
      : device_(device), slab_(std::move(slab)), cache_(cache) {}

  // Starts a new input set: the next inputs reuse the host images of the previous set in call
  // order, so every set holds the same values in distinct memory.
  void begin_set();
  // An input of |desc|'s dtype and shape filled with uniform [-1, 1) values (quantised for
  // block formats).
  Result<ValueId> random(Graph& graph, Tensor desc);
  Result<ValueId> i32(Graph& graph, Tensor desc, const std::vector<int32_t>& values);

  int64_t set_bytes() const { return set_bytes_; }   // bytes of the current set
  int64_t total_bytes() const { return total_bytes_; }  // bytes of all sets placed

 private:
  Result<Tensor> place(Tensor desc, const std::vector<uint8_t>& image);
  std::shared_ptr<const std::vector<uint8_t>> random_image(const Tensor& desc);

  Device& device_;
  BufferPtr slab_;
  size_t slab_used_ = 0;
  ImageCache* cache_;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> images_;
  size_t next_image_ = 0;
  int64_t set_bytes_ = 0;
  int64_t total_bytes_ = 0;
};

}  // namespace tessera::bench

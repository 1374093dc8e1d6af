// Tensor: a typed, shaped, strided window onto a device Buffer. Views share the buffer.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/status.h"
#include "quant/dtype.h"

namespace tessera {

class Device;

inline constexpr int kMaxDims = 4;

// Device memory. Backends subclass it; the base records what every backend shares.
// Thread-safety: a Buffer is immutable after creation; its contents are the backend's concern.
class Buffer {
 public:
  Buffer(Device* device, size_t size, void* host_ptr) : device_(device), size_(size), host_(host_ptr) {}
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Device* device() const { return device_; }
  size_t size() const { return size_; }
  // The host address of byte 0 when the memory is host-addressable (CPU backend, lavapipe
  // host-visible memory, mapped model files); nullptr otherwise.
  void* host_ptr() const { return host_; }

 private:
  Device* device_;
  size_t size_;
  void* host_;
};
using BufferPtr = std::shared_ptr<Buffer>;

// How a weight's bytes are arranged. kRows is the dtype's own row layout (GGUF order), which
// every op and every backend reads. Any other value was produced by one device's
// prepare_weight() (core/device.h) and is that backend's own tag (the CPU's interleaved row
// tiles, later CUDA's MMQ/Marlin tiles): only that device's matmul kernels read such a tensor,
// its strides are not meaningful, and the Executor refuses it anywhere else.
enum class WeightLayout : uint16_t {
  kRows = 0,
  kCpuTile16 = 1,  // backends/cpu/matmul_tiled.cpp: Q4_0/Q4_1/Q8_0/Q4_K/Q6_K in tiles of 16 rows
};

// Shapes are outermost-first, like numpy: a weight matrix is [out_features, in_features] and
// row r starts at offset + r * stride[0]. Strides are in bytes. For block formats (q4_0 ...) the
// last dimension is always contiguous, a multiple of the block size, and stride[rank-1] is 0.
struct Tensor {
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};
  BufferPtr buffer;   // null for a description not yet placed in memory
  size_t offset = 0;  // bytes from the start of |buffer|
  std::string name;
  WeightLayout layout = WeightLayout::kRows;

  // A contiguous tensor description (no buffer).
  static Tensor make(DType dtype, std::initializer_list<int64_t> shape, std::string name = {});
  static Tensor make(DType dtype, int rank, const int64_t* shape, std::string name = {});

  int64_t dim(int i) const { return shape[i < 0 ? rank + i : i]; }
  int64_t numel() const;
  // The product of all but the last dim (a [R, 0] tensor still has R rows; numel() / cols()
  // would divide by zero).
  int64_t rows() const {
    int64_t r = 1;
    for (int i = 0; i + 1 < rank; ++i) r *= shape[i];
    return r;
  }
  int64_t cols() const { return rank == 0 ? 1 : shape[rank - 1]; }
  // Bytes of one contiguous row of the last dimension.
  int64_t row_bytes() const { return dtype_row_bytes(dtype, cols()); }
  // Bytes of the whole tensor if it were contiguous.
  int64_t nbytes() const { return rows() * row_bytes(); }
  bool is_contiguous() const;
  bool same_shape(const Tensor& o) const;
  // Host address of element 0, or nullptr when the buffer is not host-addressable.
  void* host_data() const {
    return buffer && buffer->host_ptr() ? static_cast<char*>(buffer->host_ptr()) + offset : nullptr;
  }
  // Byte offset (relative to element 0) of the row with leading indices i0..i2 (rank<=4).
  int64_t row_offset(int64_t flat_row) const;
  // "[3, 576] f32" for messages.
  std::string shape_string() const;
  void set_contiguous_strides();
};

// Contiguous byte strides for |shape|.
void contiguous_strides(DType dtype, int rank, const int64_t* shape, int64_t* stride);

}  // namespace tessera

#include "core/tensor.h"

#include <cassert>

namespace tessera {

void contiguous_strides(DType dtype, int rank, const int64_t* shape, int64_t* stride) {
  if (rank == 0) return;
  const auto& tr = dtype_traits(dtype);
  stride[rank - 1] = tr.is_quantized ? 0 : tr.block_bytes;
  int64_t acc = dtype_row_bytes(dtype, shape[rank - 1]);
  for (int i = rank - 2; i >= 0; --i) {
    stride[i] = acc;
    acc *= shape[i];
  }
}

Tensor Tensor::make(DType dtype, int rank, const int64_t* shape, std::string name) {
  assert(rank >= 0 && rank <= kMaxDims);
  Tensor t;
  t.dtype = dtype;
  t.rank = rank;
  for (int i = 0; i < rank; ++i) t.shape[i] = shape[i];
  t.set_contiguous_strides();
  t.name = std::move(name);
  return t;
}

Tensor Tensor::make(DType dtype, std::initializer_list<int64_t> shape, std::string name) {
  return make(dtype, int(shape.size()), shape.begin(), std::move(name));
}

void Tensor::set_contiguous_strides() { contiguous_strides(dtype, rank, shape.data(), stride.data()); }

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[i];
  return n;
}

bool Tensor::is_contiguous() const {
  std::array<int64_t, kMaxDims> s{};
  contiguous_strides(dtype, rank, shape.data(), s.data());
  for (int i = 0; i < rank; ++i)
    if (shape[i] > 1 && s[i] != stride[i]) return false;
  return true;
}

bool Tensor::same_shape(const Tensor& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (shape[i] != o.shape[i]) return false;
  return true;
}

int64_t Tensor::row_offset(int64_t flat_row) const {
  int64_t off = 0;
  for (int i = rank - 2; i >= 0; --i) {
    off += (flat_row % shape[i]) * stride[i];
    flat_row /= shape[i];
  }
  return off;
}

std::string Tensor::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += "] ";
  s += dtype_name(dtype);
  return s;
}

}  // namespace tessera

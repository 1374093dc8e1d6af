#include <cstring>

#include "core/reference/reference.h"
#include "quant/half.h"

namespace tessera::ref {

std::vector<double> load_row(const Tensor& t, int64_t flat_row) {
  const int64_t n = t.cols();
  std::vector<double> out(static_cast<size_t>(n));
  const char* row = static_cast<const char*>(t.host_data()) + t.row_offset(flat_row);
  const auto& tr = dtype_traits(t.dtype);
  if (tr.is_quantized) {
    std::vector<float> tmp(static_cast<size_t>(n));
    tr.dequantize_row(row, tmp.data(), n);
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = tmp[size_t(i)];
    return out;
  }
  const int64_t es = t.stride[size_t(t.rank - 1)];
  for (int64_t i = 0; i < n; ++i) {
    const char* p = row + i * es;
    switch (t.dtype) {
      case DType::kF32: { float f; std::memcpy(&f, p, 4); out[size_t(i)] = f; break; }
      case DType::kF16: { uint16_t h; std::memcpy(&h, p, 2); out[size_t(i)] = fp16_to_f32(h); break; }
      case DType::kBF16: { uint16_t h; std::memcpy(&h, p, 2); out[size_t(i)] = bf16_to_f32(h); break; }
      case DType::kI8: out[size_t(i)] = double(*reinterpret_cast<const int8_t*>(p)); break;
      case DType::kI32: { int32_t v; std::memcpy(&v, p, 4); out[size_t(i)] = v; break; }
      default: out[size_t(i)] = 0.0; break;
    }
  }
  return out;
}

void store_row(const Tensor& t, int64_t flat_row, const double* values) {
  const int64_t n = t.cols();
  char* row = static_cast<char*>(t.host_data()) + t.row_offset(flat_row);
  const auto& tr = dtype_traits(t.dtype);
  if (tr.is_quantized) {
    std::vector<float> tmp(values, values + n);
    tr.quantize_row(tmp.data(), row, n);
    return;
  }
  const int64_t es = t.stride[size_t(t.rank - 1)];
  for (int64_t i = 0; i < n; ++i) {
    char* p = row + i * es;
    const float f = float(values[i]);
    switch (t.dtype) {
      case DType::kF32: std::memcpy(p, &f, 4); break;
      case DType::kF16: { const uint16_t h = f32_to_fp16(f); std::memcpy(p, &h, 2); break; }
      case DType::kBF16: { const uint16_t h = f32_to_bf16(f); std::memcpy(p, &h, 2); break; }
      case DType::kI8: *reinterpret_cast<int8_t*>(p) = int8_t(values[i]); break;
      case DType::kI32: { const int32_t v = int32_t(values[i]); std::memcpy(p, &v, 4); break; }
      default: break;
    }
  }
}

int32_t load_i32(const Tensor& t, int64_t flat_index) {
  const int64_t row = flat_index / t.cols(), col = flat_index % t.cols();
  const char* p = static_cast<const char*>(t.host_data()) + t.row_offset(row) + col * t.stride[size_t(t.rank - 1)];
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace tessera::ref

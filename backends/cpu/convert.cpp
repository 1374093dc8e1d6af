// Float format conversions (f32/f16/bf16), the row access helpers every CPU kernel shares, and
// the cast and copy ops.
#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cpu/kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/cpu/convert.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "backends/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu::HWY_NAMESPACE {

template <DType T>
void to_f32_t(const void* src, float* dst, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  const char* s = static_cast<const char*>(src);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(load_as_f32<T>(df, s + i * elem_bytes<T>()), df, dst + i);
  for (; i < n; ++i) dst[i] = scalar_as_f32<T>(s + i * elem_bytes<T>());
}

template <DType T>
void from_f32_t(const float* src, void* dst, int64_t n) {
  const DF df;
  const int64_t L = int64_t(hn::Lanes(df));
  char* d = static_cast<char*>(dst);
  int64_t i = 0;
  for (; i + L <= n; i += L) store_from_f32<T>(df, hn::LoadU(df, src + i), d + i * elem_bytes<T>());
  for (; i < n; ++i) scalar_from_f32<T>(src[i], d + i * elem_bytes<T>());
}

void ToF32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF16: return to_f32_t<DType::kF16>(src, dst, n);
    case DType::kBF16: return to_f32_t<DType::kBF16>(src, dst, n);
    default: return to_f32_t<DType::kF32>(src, dst, n);
  }
}

void FromF32(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::kF16: return from_f32_t<DType::kF16>(src, dst, n);
    case DType::kBF16: return from_f32_t<DType::kBF16>(src, dst, n);
    default: return from_f32_t<DType::kF32>(src, dst, n);
  }
}

}  // namespace tessera::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(ToF32);
HWY_EXPORT(FromF32);

void to_f32(DType t, const void* src, float* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(ToF32)(t, src, dst, n); }
void from_f32(DType t, const float* src, void* dst, int64_t n) { HWY_DYNAMIC_DISPATCH(FromF32)(t, src, dst, n); }

bool last_dim_dense(const Tensor& t) {
  // Block formats are always dense along a row (their element stride is recorded as 0).
  return t.rank == 0 || dtype_traits(t.dtype).is_quantized || t.shape[size_t(t.rank - 1)] <= 1 || t.stride[size_t(t.rank - 1)] == dtype_traits(t.dtype).block_bytes;
}

float* thread_scratch(int slot, int64_t n_floats) {
  constexpr int kSlots = 8;
  thread_local std::vector<float> buffers[kSlots];
  auto& b = buffers[slot % kSlots];
  if (int64_t(b.size()) < n_floats) b.resize(size_t(n_floats));
  return b.data();
}

const float* load_row_f32(const Tensor& t, int64_t row, float* scratch) {
  const char* p = static_cast<const char*>(t.host_data()) + t.row_offset(row);
  const int64_t n = t.cols();
  if (last_dim_dense(t)) {
    if (t.dtype == DType::kF32) return reinterpret_cast<const float*>(p);
    to_f32(t.dtype, p, scratch, n);
    return scratch;
  }
  const int64_t es = t.stride[size_t(t.rank - 1)];
  for (int64_t i = 0; i < n; ++i) to_f32(t.dtype, p + i * es, scratch + i, 1);
  return scratch;
}

void store_row_f32(const Tensor& t, int64_t row, const float* src) {
  char* p = static_cast<char*>(t.host_data()) + t.row_offset(row);
  const int64_t n = t.cols();
  if (last_dim_dense(t)) {
    from_f32(t.dtype, src, p, n);
    return;
  }
  const int64_t es = t.stride[size_t(t.rank - 1)];
  for (int64_t i = 0; i < n; ++i) from_f32(t.dtype, src + i, p + i * es, 1);
}

float* out_row_f32(const Tensor& t, int64_t row, float* scratch) {
  if (t.dtype == DType::kF32 && last_dim_dense(t)) return reinterpret_cast<float*>(static_cast<char*>(t.host_data()) + t.row_offset(row));
  return scratch;
}

void finish_row_f32(const Tensor& t, int64_t row, const float* res) {
  if (t.dtype == DType::kF32 && last_dim_dense(t)) return;  // computed in place by out_row_f32
  store_row_f32(t, row, res);
}

// cast and copy: row by row through f32 (exact for f16/bf16 sources), or a plain byte copy when
// the dtypes match and both rows are dense.
Status convert(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& x = g.input_tensor(n, 0);
  const Tensor& out = g.output_tensor(n);
  const int64_t rows = x.rows(), cols = x.cols();
  const bool raw = x.dtype == out.dtype && last_dim_dense(x) && last_dim_dense(out);
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, cols));
  pool.parallel_for(rows, grain, [&](int64_t r0, int64_t r1, int) {
    float* tmp = thread_scratch(0, cols);
    for (int64_t r = r0; r < r1; ++r) {
      if (raw) {
        std::memcpy(static_cast<char*>(out.host_data()) + out.row_offset(r),
                    static_cast<const char*>(x.host_data()) + x.row_offset(r), size_t(x.row_bytes()));
      } else {
        store_row_f32(out, r, load_row_f32(x, r, tmp));
      }
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE

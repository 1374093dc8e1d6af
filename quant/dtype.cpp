#include "quant/dtype.h"

#include <cstring>

#include "quant/ggml_blocks.h"
#include "quant/half.h"

namespace tessera {
namespace {

void quantize_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }
void dequantize_f32(const void* x, float* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }
void quantize_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}
void dequantize_f16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(vx);
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}
void quantize_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}
void dequantize_bf16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const uint16_t*>(vx);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

// Indexed by DType; the static_asserts below keep the order honest.
constexpr DTypeTraits kTable[] = {
    {DType::kF32, "f32", 1, 4, 0, true, false, quantize_f32, dequantize_f32},
    {DType::kF16, "f16", 1, 2, 1, true, false, quantize_f16, dequantize_f16},
    {DType::kBF16, "bf16", 1, 2, 30, true, false, quantize_bf16, dequantize_bf16},
    {DType::kI8, "i8", 1, 1, 24, false, false, nullptr, nullptr},
    {DType::kI32, "i32", 1, 4, 26, false, false, nullptr, nullptr},
    {DType::kQ8_0, "q8_0", 32, 34, 8, false, true, quantize_row_q8_0, dequantize_row_q8_0},
    {DType::kQ4_0, "q4_0", 32, 18, 2, false, true, quantize_row_q4_0, dequantize_row_q4_0},
    {DType::kQ4_1, "q4_1", 32, 20, 3, false, true, quantize_row_q4_1, dequantize_row_q4_1},
};
static_assert(sizeof(kTable) / sizeof(kTable[0]) == kNumDTypes, "dtype table out of sync");

constexpr bool table_in_order() {
  for (int i = 0; i < kNumDTypes; ++i)
    if (static_cast<int>(kTable[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_order(), "dtype table must be indexed by DType");

}  // namespace

const DTypeTraits& dtype_traits(DType t) { return kTable[static_cast<int>(t)]; }
const DTypeTraits* dtype_table() { return kTable; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& tr : kTable)
    if (name == tr.name) return tr.dtype;
  return std::nullopt;
}

std::optional<DType> dtype_from_gguf(int gguf_type) {
  for (const auto& tr : kTable)
    if (tr.gguf_type >= 0 && tr.gguf_type == gguf_type) return tr.dtype;
  return std::nullopt;
}

std::string dtype_row_check(DType t, int64_t n) {
  const auto& tr = dtype_traits(t);
  if (n % tr.block_elems == 0) return {};
  return std::string(tr.name) + ": row of " + std::to_string(n) +
         " elements is not a multiple of the block size " + std::to_string(tr.block_elems);
}

}  // namespace tessera

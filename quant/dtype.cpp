#include "quant/dtype.h"

#include <cstring>

#include "quant/fp4.h"
#include "quant/fp8.h"
#include "quant/ggml_blocks.h"
#include "quant/half.h"
#include "quant/int_group.h"
#include "quant/kquants.h"

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
    {DType::kQ5_0, "q5_0", 32, 22, 6, false, true, quantize_row_q5_0, dequantize_row_q5_0},
    {DType::kQ5_1, "q5_1", 32, 24, 7, false, true, quantize_row_q5_1, dequantize_row_q5_1},
    {DType::kQ4_K, "q4_k", 256, 144, 12, false, true, quantize_row_q4_k, dequantize_row_q4_k},
    {DType::kQ5_K, "q5_k", 256, 176, 13, false, true, quantize_row_q5_k, dequantize_row_q5_k},
    {DType::kQ6_K, "q6_k", 256, 210, 14, false, true, quantize_row_q6_k, dequantize_row_q6_k},
    {DType::kMXFP4, "mxfp4", 32, 17, 39, false, true, quantize_row_mxfp4, dequantize_row_mxfp4},
    {DType::kNVFP4, "nvfp4", 64, 36, 40, false, true, quantize_row_nvfp4, dequantize_row_nvfp4},
    // Row-scaled: a 4-byte f32 scale heads every row; blocks of 32 keep each row 4-byte aligned.
    // GGUF has no type for these layouts (nor for INT4_G*), so Tessera writes them under private
    // type ids from kTesseraGgufTypeBase up: `tessera quantize` can store every format, and
    // other GGUF readers reject such tensors as an unknown type instead of misreading them.
    {DType::kFP8_E4M3, "fp8_e4m3", 32, 32, kTesseraGgufTypeBase + 0, false, true, quantize_row_fp8_e4m3, dequantize_row_fp8_e4m3, 4},
    {DType::kFP8_E5M2, "fp8_e5m2", 32, 32, kTesseraGgufTypeBase + 1, false, true, quantize_row_fp8_e5m2, dequantize_row_fp8_e5m2, 4},
    {DType::kINT8_PC, "int8_pc", 32, 32, kTesseraGgufTypeBase + 2, false, true, quantize_row_int8_pc, dequantize_row_int8_pc, 4},
    {DType::kINT4_G32, "int4_g32", 32, 20, kTesseraGgufTypeBase + 3, false, true, quantize_row_int4<32>, dequantize_row_int4<32>},
    {DType::kINT4_G64, "int4_g64", 64, 36, kTesseraGgufTypeBase + 4, false, true, quantize_row_int4<64>, dequantize_row_int4<64>},
    {DType::kINT4_G128, "int4_g128", 128, 68, kTesseraGgufTypeBase + 5, false, true, quantize_row_int4<128>, dequantize_row_int4<128>},
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

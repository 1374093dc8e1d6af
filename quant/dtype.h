// DType: every number format Tessera knows, and one traits table describing each: its name,
// block geometry, GGUF type id, and the scalar reference quantize/dequantize of one row.
//
// Quantisation is a property of a weight tensor, not an op: matmul/matmul_id/embed take a weight
// of any DType and each backend dispatches on it. The block layouts live once, here in quant/.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

enum class DType : uint8_t {
  kF32 = 0,
  kF16,
  kBF16,
  kI8,
  kI32,
  // GGUF block formats (bit-exact with ggml).
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  // OCP / NVIDIA 4-bit floats, in GGUF's block layouts (GGUF types 39, 40).
  kMXFP4,
  kNVFP4,
  // Row-scaled formats: each row starts with an f32 scale (see row_header_bytes).
  kFP8_E4M3,
  kFP8_E5M2,
  kINT8_PC,
  // INT4 group-wise asymmetric (AWQ/GPTQ style), one DType per group size.
  kINT4_G32,
  kINT4_G64,
  kINT4_G128,
  kCount,  // keep last
};

inline constexpr int kNumDTypes = static_cast<int>(DType::kCount);

// The scalar reference for one whole row (header included). |n| is a multiple of block_elems.
// Tessera-only GGUF tensor type ids (FP8, INT8_PC, INT4_G*) start here, far above ggml's own
// ids (41 in 2026) so that new ggml types never collide with them.
inline constexpr int kTesseraGgufTypeBase = 1024;

using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);

struct DTypeTraits {
  DType dtype;
  const char* name;       // lower case, as the CLI and GGUF tools spell it: "f32", "q4_0"
  int64_t block_elems;    // elements per block; 1 for plain types
  int64_t block_bytes;    // bytes per block
  int gguf_type;          // ggml_type id, a Tessera-private id (>= kTesseraGgufTypeBase), or -1
  bool is_float;          // f32/f16/bf16: usable as an activation dtype
  bool is_quantized;      // a block format (only as a weight)
  QuantizeRowFn quantize_row;      // null for integer types
  DequantizeRowFn dequantize_row;  // null for integer types
  // Bytes at the start of every row before its first block: the f32 per-row (per-channel) scale
  // of the row-scaled formats (FP8, INT8_PC); 0 for everything else. A row of n elements is
  // row_header_bytes + n / block_elems * block_bytes bytes: always use dtype_row_bytes.
  int64_t row_header_bytes = 0;
};

const DTypeTraits& dtype_traits(DType t);
inline const char* dtype_name(DType t) { return dtype_traits(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);
std::optional<DType> dtype_from_gguf(int gguf_type);

// Bytes of a row of |n| elements (with its header, if the format has one). |n| must be a multiple
// of the block size (checked by callers; see dtype_row_check). For a tensor, multiply by the
// number of rows: never call this with numel, since row-scaled formats carry one header per row.
inline int64_t dtype_row_bytes(DType t, int64_t n) {
  const auto& tr = dtype_traits(t);
  return tr.row_header_bytes + n / tr.block_elems * tr.block_bytes;
}
// Empty string when |n| elements form whole blocks, else a message naming the dtype and sizes.
std::string dtype_row_check(DType t, int64_t n);

// Every dtype, in enum order (for sweeps in tests and bench).
const DTypeTraits* dtype_table();

}  // namespace tessera

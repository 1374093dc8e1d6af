// Repacking of quantised checkpoint tensors into quant/ layouts. Every function is exact: the
// result dequantises (quant/ scalar reference) to the same floats as the checkpoint's own
// dequantisation formula. Inputs are raw little-endian bytes whose sizes the caller checked;
// errors name the problem (values out of range), the caller adds the tensor name.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "quant/dtype.h"

namespace tessera::safetensors {

// FP8 [N, K] codes + one f32 scale per row (a per-tensor scale repeated) -> kFP8_E4M3/E5M2 rows.
Result<std::vector<uint8_t>> repack_fp8(const uint8_t* codes, const std::vector<float>& row_scale, int64_t n, int64_t k);

// AWQ (AutoAWQ GEMM): qweight i32 [K, N/8] with the nibble order 0,2,4,6,1,3,5,7 along N,
// qzeros i32 [K/G, N/8] packed the same way, scales [K/G, N] (f32 here, must be f16-exact).
// w[n, k] = (q - z) * s. -> kINT4_G{G} [N, K].
Result<std::vector<uint8_t>> repack_awq(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t n, int64_t k,
                                        int group);
// GPTQ: qweight i32 [K/8, N] packed along K (row 8i+j in bits 4j), qzeros i32 [K/G, N/8] packed
// along N in order, scales [K/G, N]. Format v1 stores zero - 1 (w = (q - (z + 1)) * s); v2 stores
// z. -> kINT4_G{G} [N, K].
Result<std::vector<uint8_t>> repack_gptq(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t n, int64_t k,
                                         int group, bool v2);

// FP4 E2M1 packed two per byte along K, element 2i in the low nibble of byte i (compressed-
// tensors, ModelOpt, gpt-oss): [N, K/2] bytes.
// MXFP4: E8M0 scale bytes [N, K/32] -> kMXFP4.
Result<std::vector<uint8_t>> repack_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t k);
// NVFP4: E4M3 scale bytes [N, K/16] (non-negative) -> kNVFP4 (K a multiple of 64).
Result<std::vector<uint8_t>> repack_nvfp4(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t k);

// The INT4 dtype for a group size (32, 64, 128), or an error naming it.
Result<DType> int4_dtype(int group);

}  // namespace tessera::safetensors

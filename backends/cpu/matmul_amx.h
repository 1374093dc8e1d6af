// Prefill GEMM on Intel AMX (Sapphire Rapids and later): activations rounded to bf16, weights of
// any block format decoded to bf16 one 32-column panel at a time, products accumulated in f32 by
// the tile unit (TDPBF16PS). Used by matmul.cpp for M >= kAmxMinRows when amx_usable().
#pragma once
#include <cstdint>

#include "backends/cpu/thread_pool.h"
#include "core/tensor.h"

namespace tessera::cpu {

// Whether the CPU has AMX-TILE and AMX-BF16 (and AVX512-BF16 for the conversions), whatever the
// kernel lets us use.
bool amx_present();
// Whether gemm_amx may run now: amx_present(), the kernel granted the tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM), Highway's dispatch allows AVX-512 VNNI (so forcing the
// dispatch down to AVX2 or AVX-512 for a test also turns AMX off), and TESSERA_CPU_AMX is not 0.
bool amx_usable();
// Whether gemm_amx handles weight dtype |w| [N, K]: N a multiple of 16, K of 32; the tiled
// layout (Q4_0/Q4_1/Q8_0/Q4_K/Q6_K) or any block format with a dequantize_row.
bool amx_supports(DType w, bool tiled, int64_t N, int64_t K);

// Activation rows this many or more take the AMX path (below, the int8-dot kernels win: the
// weight decode is paid once per 32-column panel whatever M is; docs/bench.md).
inline constexpr int64_t kAmxMinRows = 32;

// out[m, n] = sum_k x[m, k] * w[n, k] for m < M, n < N (f32, row stride |ldo| floats). |x| is any
// float tensor of M rows of K. Weight rows start at |base| + n * |row_stride|, or, when |tiled|,
// |base| holds the 16-row tiles of matmul_tiled.cpp.
void gemm_amx(ThreadPool& pool, const Tensor& x, int64_t M, DType w, const char* base, int64_t row_stride, bool tiled,
              int64_t N, int64_t K, float* out, int64_t ldo);

}  // namespace tessera::cpu

// Prefill GEMM on Intel AMX (Sapphire Rapids and later): activations rounded to bf16, weights of
// any block format decoded to bf16 one 32-column panel at a time, products accumulated in f32 by
// the tile unit (TDPBF16PS). Used by matmul.cpp for M >= amx_min_rows() when amx_usable().
#pragma once
#include <cstdint>

#include "backends/cpu/thread_pool.h"
#include "core/tensor.h"

namespace tessera::cpu {

// Whether the CPU has AMX-TILE and AMX-BF16 (and AVX512-BF16 for the conversions), whatever the
// kernel lets us use.
bool amx_present();
// Whether gemm_amx may run now: it is enabled (TESSERA_CPU_AMX=1 or amx_set_enabled), amx_present(),
// the kernel granted the tile state (arch_prctl ARCH_REQ_XCOMP_PERM), and Highway's dispatch
// allows AVX-512 VNNI (so forcing the dispatch down for a test also turns AMX off).
//
// Off by default: every other path quantises activations to int8 per 32 elements, this one
// rounds them to bf16, so a prompt's logits would depend on whether its prefill came in chunks of
// 64+ rows (AMX) or fewer (int8), or was recomputed after a preemption: greedy outputs would then
// change with the server's load, which the engine's tests (batched == alone, preemption == solo)
// and users relying on reproducible greedy output do not allow. Making AMX agree with the int8
// paths (int8 tiles with a per-32 epilogue, which measured no faster, or bf16 activations on
// every path) is open work (docs/bench.md).
bool amx_usable();
// Turns the AMX path on or off for this process, whatever the environment says (tests).
void amx_set_enabled(bool on);
// Whether gemm_amx handles weight dtype |w| [N, K]: N a multiple of 16, K of 32; the tiled
// layout (Q4_0/Q4_1/Q8_0/Q4_K/Q6_K) or any block format with a dequantize_row.
bool amx_supports(DType w, bool tiled, int64_t N, int64_t K);

// Activation rows from which the AMX path is taken (below, the int8-dot kernels win: the weight
// decode is paid once per 32-column panel whatever M is; docs/bench.md): 64 for the tiled
// formats, 256 for the others, whose rows go through the scalar dequantize_row.
inline constexpr int64_t kAmxMinRowsTiled = 64, kAmxMinRowsRows = 256;
inline int64_t amx_min_rows(bool tiled) { return tiled ? kAmxMinRowsTiled : kAmxMinRowsRows; }

// out[m, n] = sum_k x[m, k] * w[n, k] for m < M, n < N (f32, row stride |ldo| floats). |x| is any
// float tensor of M rows of K. Weight rows start at |base| + n * |row_stride|, or, when |tiled|,
// |base| holds the 16-row tiles of matmul_tiled.cpp.
void gemm_amx(ThreadPool& pool, const Tensor& x, int64_t M, DType w, const char* base, int64_t row_stride, bool tiled,
              int64_t N, int64_t K, float* out, int64_t ldo);

}  // namespace tessera::cpu

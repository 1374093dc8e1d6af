// The GPU kernels of the op set, written once for CUDA, HIP and the host simulator (sim/).
//
// Each kernel is a struct with an Args type (args.h) and a body `run(c, args)` templated on an
// execution context C, which supplies what a kernel asks of the hardware:
//   c.tid() c.ntid()                thread index in the block, block size (1-D blocks)
//   c.bx() c.by() c.nbx() c.nby()   block index and grid size (2-D grids)
//   c.sync()                        __syncthreads
//   c.shfl_xor(v, mask)             butterfly exchange within a warp of kWarp (32) lanes
//   c.shfl(i, src)                  an int32 from lane |src| of the warp
//   c.mma_s8(a0, a1, b, d)          the warp's 16x8x16 int8 matrix multiply-add (mma_s8_shfl says
//                                   how the fragments are laid out): a tensor-core mma.sync on
//                                   NVIDIA sm80+, mma_s8_shfl on HIP, a warp collective in sim/
//   c.template smem<Slot, T, N>()   the block's shared array number Slot
//   c.set_error(err, code)          records the first run-time data error (atomicCAS)
// kernel_ctx.h maps them to CUDA/HIP intrinsics; sim/ runs every thread of a block as a fiber
// on the host, so the conformance suite checks these bodies against the reference without a GPU.
//
// kWarp is 32 on every vendor: HIP's wave64 GPUs run these shuffles in halves (width 32).
//
// The kernels live one family per file under kernels/ (common.h: TS_KFN, reductions, decode16_tail);
// this header includes them all.
#pragma once
#include "backends/cuda/kernels/common.h"
#include "backends/cuda/kernels/pointwise.h"
#include "backends/cuda/kernels/matmul.h"
#include "backends/cuda/kernels/moe.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/recurrent.h"
#include "backends/cuda/kernels/lora.h"

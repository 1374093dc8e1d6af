// The roofline ceilings: peak read and copy bandwidth and peak matmul FLOP/s per dtype.
// The CPU is measured directly (wide loads, one buffer part per thread; oneDNN GEMMs); any
// other device through the HAL (a large GEMV for bandwidth, copy, large matmuls for FLOP/s).
#pragma once
#include <vector>

#include "bench/report.h"
#include "core/device.h"

namespace tessera::bench {

struct CeilingOptions {
  bool quick = false;
  size_t buffer_bytes = size_t(1) << 30;  // CPU bandwidth buffer
  int repeats = 9;
};

// Read bandwidth (GB/s) of |threads| threads, each reading its own part of |buffer| with the
// widest loads the CPU has; |first_touch| writes each part from its owner thread first.
Stat cpu_read_bandwidth(float* buffer, size_t n_floats, int threads, bool first_touch, int repeats);
// Copy bandwidth (GB/s, read + write bytes): each thread copies its part of the first half of
// |buffer| into the second half.
Stat cpu_copy_bandwidth(float* buffer, size_t n_floats, int threads, int repeats);

// read (|threads|), read_1t, copy, and oneDNN f32 / bf16 / int8 GEMM peaks where available.
std::vector<Ceiling> cpu_ceilings(int threads, const CeilingOptions& o);
// oneDNN GEMM peak in GFLOP/s for "f32", "bf16" or "int8" (u8s8s32) with |threads| threads;
// Unavailable without oneDNN or when the CPU lacks the dtype.
// |cpu_gflops|, when given, receives the same rate by process CPU time / threads (shared machines).
Result<Stat> onednn_gemm_gflops(const std::string& dtype, int64_t size, int threads, int repeats,
                                double* cpu_gflops = nullptr);

// Through the HAL: read (a large f32 GEMV), copy (the copy op), and one matmul peak per
// weight dtype the device supports.
std::vector<Ceiling> hal_ceilings(Device& device, const CeilingOptions& o);

// Sets the roofline (bandwidth_gbs, compute_gflops) from the measured ceilings.
void set_roofline(DeviceReport& d);

}  // namespace tessera::bench

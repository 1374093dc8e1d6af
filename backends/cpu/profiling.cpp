// The CPU backend's DeviceProfiling (core/profiling.h): its pool for the bench's read passes, and
// the decode GEMV kernels timed with their weights in each core's cache.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels.h"
#include "core/profiling.h"

namespace tessera::cpu {
namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class CpuProfiling final : public DeviceProfiling {
 public:
  explicit CpuProfiling(ThreadPool& pool) : pool_(pool) {}
  int workers() const override { return pool_.size(); }
  void run_on_workers(const std::function<void(int)>& work) override { pool_.run_on_all(work); }
  Result<double> in_cache_gemv_gbs(DType w, const uint8_t* image, int64_t rows, int64_t K, double seconds,
                                   bool prepared) override;

 private:
  ThreadPool& pool_;
};

Result<double> CpuProfiling::in_cache_gemv_gbs(DType w, const uint8_t* image, int64_t rows, int64_t K, double seconds,
                                               bool prepared) {
  if (rows < 1 || K < 32 || K % 32 != 0)
    return InvalidArgument("in_cache_gemv_gbs: rows must be >= 1 and K a multiple of 32");
  if (!kernels_support(OpKind::kMatmul, DType::kF32, w))
    return Unimplemented(std::string("in_cache_gemv_gbs: no CPU matmul kernel for ") + dtype_name(w));
  const int threads = pool_.size();
  const int64_t rb = dtype_row_bytes(w, K);
  // Prepared: the tiles CpuDevice::prepare_weight makes (whole tiles), read by the tiled kernel.
  const bool tiled = prepared && repack_tiles_supported(w, rows / 16 * 16, K);
  const int64_t rows_used = tiled ? rows / 16 * 16 : rows;
  std::vector<std::vector<uint8_t>> img;
  for (int t = 0; t < threads; ++t) {
    img.emplace_back(image, image + rows * rb);
    if (tiled) {
      std::vector<uint8_t> tiles(img.back().size());
      repack_tiles(pool_, w, reinterpret_cast<const char*>(img.back().data()), rb, rows_used, K,
                   reinterpret_cast<char*>(tiles.data()));
      img.back() = std::move(tiles);
    }
  }
  // A fixed, non-constant activation row.
  std::vector<float> xf(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) xf[size_t(k)] = float((k * 7919) % 2001 - 1000) / 1000.0f;
  std::vector<ActQ8> xq(static_cast<size_t>(K / 32));
  const bool q8 = uses_act_q8(w);
  if (q8) quantize_act_q8(xf.data(), xq.data(), K);
  std::vector<int32_t> xsum(static_cast<size_t>(K / 32));
  for (size_t b = 0; b < xsum.size(); ++b) {
    int32_t s = 0;
    for (int8_t q : xq[b].qs) s += q;
    xsum[b] = s;
  }
  std::vector<std::vector<float>> out(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(rows)));
  const auto tile = [&](int t) {
    const char* wb = reinterpret_cast<const char*>(img[size_t(t)].data());
    if (tiled)
      gemm_tiled_range(w, xq.data(), K / 32, xsum.data(), 0, 1, wb, 0, rows_used / 16, K / 32, out[size_t(t)].data(),
                       rows);
    else if (q8) gemm_q8_tile(w, xq.data(), K / 32, 0, 1, wb, rb, 0, rows, K / 32, out[size_t(t)].data(), rows);
    else gemm_float_tile(w, xf.data(), K, 0, 1, wb, rb, 0, rows, K, out[size_t(t)].data(), rows);
  };
  // Calls per run: enough for |seconds| at the rate of one timed call.
  double t0 = seconds_now();
  tile(0);
  tile(0);
  const double one = std::max(1e-7, (seconds_now() - t0) / 2);
  const int64_t calls = std::max<int64_t>(10, int64_t(seconds / one));
  std::vector<double> gbs;
  for (int r = 0; r < 5; ++r) {
    t0 = seconds_now();
    pool_.run_on_all([&](int t) {
      for (int64_t c = 0; c < calls; ++c) tile(t);
    });
    gbs.push_back(double(threads) * double(calls) * double(rb * rows_used) / (seconds_now() - t0) / 1e9);
  }
  std::nth_element(gbs.begin(), gbs.begin() + 2, gbs.end());
  return gbs[2];
}

}  // namespace

DeviceProfiling* CpuDevice::profiling() {
  if (!profiling_) profiling_ = std::make_unique<CpuProfiling>(pool_);
  return profiling_.get();
}

}  // namespace tessera::cpu

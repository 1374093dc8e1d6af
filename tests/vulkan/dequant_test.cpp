// The shaders' weight decoders (shaders/dequant_units.glsl) against quant/'s scalar reference,
// bit for bit, for every block format the device claims: embed gathers whole rows, and a matmul
// by the identity (x = I, so out = W^T with every other product an exact zero) reads them
// through the GEMV's and the tiled GEMM's unit loads. The conformance suite compares sums within
// a tolerance; this catches a decoder that is off by one rounding or one code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/vulkan/device.h"
#include "tests/support/test_support.h"
#include "tests/vulkan/first_device.h"
#include "tests/conformance/harness.h"

namespace tessera::vulkan {
namespace {

std::vector<DType> claimed_block_formats(const Device& dev) {
  std::vector<DType> out;
  for (DType w : conformance::all_weight_dtypes())
    if (dtype_traits(w).is_quantized && dev.supports(OpKind::kMatmul, DType::kF32, w)) out.push_back(w);
  return out;
}

// quant/'s decoding of |rows| rows of |k| elements (as f32: testing::decode widens them exactly).
std::vector<float> reference_rows(DType w, const std::vector<uint8_t>& bytes, int64_t rows, int64_t k) {
  const std::vector<double> d = testing::decode(Tensor::make(w, {rows, k}), bytes.data());
  return std::vector<float>(d.begin(), d.end());
}

// Equal bits, or both NaN (payloads may differ), or a subnormal result flushed to zero: Vulkan
// leaves f32 denormals to the implementation (lavapipe flushes them), and only the
// random-byte case below reaches them (an MXFP4 exponent byte below 2, a tiny FP8 row scale).
// A matmul sum turns -0 into +0 (0 + -0 = +0), so there |any_zero_sign| accepts either zero.
bool same_value(float got, float want, bool any_zero_sign) {
  if (std::isnan(want)) return std::isnan(got);
  if (any_zero_sign && want == 0.0f && got == 0.0f) return true;
  if (std::fpclassify(want) == FP_SUBNORMAL && got == 0.0f) return true;
  uint32_t a, b;
  std::memcpy(&a, &got, 4);
  std::memcpy(&b, &want, 4);
  return a == b;
}

// "" when |got| (doubles from f32) matches |want| value for value, else the first mismatch.
std::string compare(const std::vector<double>& got, const std::vector<float>& want, int64_t cols,
                    bool any_zero_sign) {
  if (got.size() != want.size()) return "got " + std::to_string(got.size()) + " values, want " + std::to_string(want.size());
  for (size_t i = 0; i < want.size(); ++i)
    if (!same_value(float(got[i]), want[i], any_zero_sign))
      return "element [" + std::to_string(int64_t(i) / cols) + ", " + std::to_string(int64_t(i) % cols) + "]: got " +
             std::to_string(got[i]) + ", want " + std::to_string(want[i]);
  return "";
}

// Graph inputs from host bytes (checked), the outputs computed and downloaded.
class GraphRun {
 public:
  explicit GraphRun(Device& dev) : dev_(dev) {}
  ValueId put(const Tensor& desc, const void* bytes) {
    auto t = upload_new(dev_, desc, bytes);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? g_.input(*t) : kNoValue;
  }
  Graph& graph() { return g_; }
  // Computes the graph; returns |outs| downloaded and concatenated.
  std::vector<double> compute(const std::vector<ValueId>& outs) {
    for (ValueId v : outs) g_.mark_output(v);
    Status s = dev_.compute(g_);
    if (s.ok()) s = dev_.synchronize();
    EXPECT_TRUE(s.ok()) << s.to_string();
    std::vector<double> all;
    if (!s.ok()) return all;
    for (ValueId v : outs) {
      const std::vector<double> got = testing::download_values(dev_, g_.tensor(v));
      all.insert(all.end(), got.begin(), got.end());
    }
    return all;
  }

 private:
  Device& dev_;
  Graph g_;
};

// Random bytes, so every code, scale byte and special value (E8M0 0xFF, UE4M3 0x7F and 0xFF,
// E4M3 NaN, f16 infinities) occurs (256 rows: each scale byte value at least once, whp and so
// with this seed); embed stores each decoded value unchanged.
TEST(VulkanDequant, EmbedDecodesRandomBytesLikeTheReference) {
  auto dev = first_device();
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  testing::Rng rng(7001);
  for (DType w : claimed_block_formats(*dev)) {
    const int64_t V = 256, K = conformance::fit_k(w, 256);
    const Tensor desc = Tensor::make(w, {V, K});
    std::vector<uint8_t> bytes(size_t(V * dtype_row_bytes(w, K)));
    for (auto& b : bytes) b = uint8_t(rng());
    std::vector<int32_t> ids(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) ids[size_t(i)] = int32_t((i * 5) % V);  // every row, out of order
    GraphRun run(*dev);
    const ValueId wv = run.put(desc, bytes.data());
    const ValueId iv = run.put(Tensor::make(DType::kI32, {V}), ids.data());
    const std::vector<double> got = run.compute({run.graph().embed(wv, iv)});
    const std::vector<float> rows = reference_rows(w, bytes, V, K);
    std::vector<float> want(size_t(V * K));
    for (int64_t t = 0; t < V; ++t)
      std::copy_n(rows.begin() + ids[size_t(t)] * K, K, want.begin() + t * K);
    EXPECT_EQ(compare(got, want, K, false), "") << "embed " << dtype_name(w) << " [" << V << ", " << K << "]";
  }
}

// Quantised from outlier-heavy rows of magnitudes 2^-10 .. 2^6 (as large as f16 scales allow,
// FP8 subnormal codes); I @ W^T gives W^T exactly. |m| rows of I per matmul: 8 keeps every one
// on the GEMV (M <= 8), K sends it to the tiled GEMM when the device uses it.
void check_identity_matmul(VulkanDevice& dev, int64_t m, const char* path) {
  testing::Rng rng(7002);
  for (DType w : claimed_block_formats(dev)) {
    const int64_t N = 9, K = conformance::fit_k(w, 256), rows = std::min(m, K);
    std::vector<float> values = testing::outlier_floats(rng, N * K);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t k = 0; k < K; ++k) values[size_t(r * K + k)] *= std::ldexp(1.0f, int(r * 2) - 10);
    const Tensor desc = Tensor::make(w, {N, K});
    const std::vector<uint8_t> bytes = testing::encode(desc, values);
    std::vector<float> eye(size_t(K * K), 0.0f);
    for (int64_t k = 0; k < K; ++k) eye[size_t(k * K + k)] = 1.0f;
    GraphRun run(dev);
    const ValueId wv = run.put(desc, bytes.data());
    std::vector<ValueId> outs;
    for (int64_t r0 = 0; r0 < K; r0 += rows)
      outs.push_back(run.graph().matmul(run.put(Tensor::make(DType::kF32, {rows, K}), eye.data() + r0 * K), wv));
    const std::vector<double> got = run.compute(outs);
    const std::vector<float> ref = reference_rows(w, bytes, N, K);
    std::vector<float> want(size_t(K * N));  // [K, N]: the transpose
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) want[size_t(k * N + n)] = ref[size_t(n * K + k)];
    EXPECT_EQ(compare(got, want, N, true), "") << path << " matmul " << dtype_name(w) << " [" << N << ", " << K << "]";
  }
}

TEST(VulkanDequant, GemvReadsUnitsLikeTheReference) {
  auto dev = first_device();
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  check_identity_matmul(*dev, 8, "GEMV");
}

TEST(VulkanDequant, TiledGemmReadsUnitsLikeTheReference) {
  auto dev = first_device({.force_tiled_gemm = true});
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  check_identity_matmul(*dev, 1 << 20, "tiled");
}

}  // namespace
}  // namespace tessera::vulkan

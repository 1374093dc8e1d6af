// The CPU kernels under every SIMD target Highway can dispatch to here (SCALAR included, which
// the conformance suite never reaches on an AVX2 machine), on shapes large enough to take the
// threaded, tiled and oneDNN paths, and with bad data-dependent inputs.
#include <gtest/gtest.h>

#include <hwy/targets.h>

#include "backends/cpu/cpu_device.h"
#include "tests/conformance/harness.h"

namespace tessera::cpu {
namespace {

using conformance::Case;
using conformance::CaseContext;
using V = std::vector<ValueId>;

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (auto fn : {conformance::linear_cases, conformance::pointwise_cases, conformance::attention_cases,
                  conformance::moe_cases})
    for (Case& c : fn()) out.push_back(std::move(c));
  return out;
}

// Shapes past the thresholds where kernels switch strategy: N split across threads (decode),
// M x N tiles (prefill), oneDNN (f32, M >= 16), a long context attention run on the pool.
std::vector<Case> large_cases() {
  std::vector<Case> cases;
  uint64_t seed = 9000;
  for (DType w : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1})
    for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1000, 512}, {70, 300, 256}, {20, 257, 320}})
      cases.push_back({std::string("large matmul/w=") + dtype_name(w) + "/M=" + std::to_string(M), OpKind::kMatmul,
                       DType::kF32, w, ++seed, [=](CaseContext& c) {
                         return V{c.graph().matmul(c.input(DType::kF32, {M, K}), c.input(w, {N, K}))};
                       }});
  for (DType cache : {DType::kF32, DType::kF16})
    cases.push_back({std::string("long attention/cache=") + dtype_name(cache), OpKind::kAttention, DType::kF32, cache,
                     ++seed, [=](CaseContext& c) {
                       const int64_t T = 40, H = 4, Hkv = 2, D = 64, bs = 16, ctx = 300, nb = (ctx + bs - 1) / bs;
                       std::vector<int32_t> table(static_cast<size_t>(nb)), slots;
                       for (int64_t b = 0; b < nb; ++b) table[size_t(b)] = int32_t(nb - 1 - b);  // reversed blocks
                       for (int64_t p = ctx - T; p < ctx; ++p) slots.push_back(int32_t(table[size_t(p / bs)] * bs + p % bs));
                       const ValueId kc = c.input(cache, {nb, bs, Hkv, D}), vc = c.input(cache, {nb, bs, Hkv, D});
                       const ValueId out = c.graph().attention(
                           {c.input(DType::kF32, {T, H, D}), c.input(DType::kF32, {T, Hkv, D}),
                            c.input(DType::kF32, {T, Hkv, D}), kc, vc, c.i32_values({T}, slots),
                            c.i32_values({2}, {0, int32_t(T)}), c.i32_values({1}, {int32_t(ctx)}),
                            c.i32_values({1, nb}, table)},
                           AttentionParams{});
                       return V{out, kc, vc};
                     }});
  return cases;
}

TEST(CpuKernels, EverySimdTargetMatchesTheReference) {
  const int64_t targets[] = {HWY_AVX3_DL, HWY_AVX3, HWY_AVX2, HWY_SCALAR};
  auto cases = all_cases();
  for (Case& c : large_cases()) cases.push_back(std::move(c));
  int tested = 0;
  for (int64_t target : targets) {
    // SCALAR is the fallback every dispatch table has, whatever SupportedTargets reports.
    if (target != HWY_SCALAR && !(hwy::SupportedTargets() & target)) continue;
    hwy::SetSupportedTargetsForTest(target);
    for (int threads : {1, 3}) {
      CpuDevice dev(threads);
      for (const Case& c : cases) {
        const std::string err = conformance::run_case(dev, c);
        EXPECT_TRUE(err.empty()) << "target " << hwy::TargetName(target) << ", " << threads << " threads: " << err;
      }
    }
    ++tested;
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(tested, 2) << "expected at least SCALAR and one SIMD target";
}

// Runs a graph built by |build| and returns compute's status.
Status run(const std::function<void(CaseContext&)>& build) {
  CpuDevice dev(2);
  CaseContext c(dev, 5);
  build(c);
  if (!c.status().ok()) return c.status();
  if (!c.graph().status().ok()) return c.graph().status();
  return dev.compute(c.graph());
}

TEST(CpuKernels, EmbedRejectsAnIdOutOfRange) {
  const Status s = run([](CaseContext& c) { c.graph().embed(c.input(DType::kQ4_0, {10, 64}), c.i32_values({3}, {1, 10, 2})); });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("id 10"), std::string::npos) << s.message();
}

TEST(CpuKernels, MatmulIdRejectsAnExpertOutOfRange) {
  const Status s = run([](CaseContext& c) {
    c.graph().matmul_id(c.input(DType::kF32, {2, 32}), c.input(DType::kQ8_0, {3, 8, 32}), c.i32_values({2, 1}, {0, -1}));
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("expert id -1"), std::string::npos) << s.message();
}

TEST(CpuKernels, AttentionRejectsABlockTableOutOfRange) {
  const Status s = run([](CaseContext& c) {
    c.graph().attention({c.input(DType::kF32, {1, 2, 16}), c.input(DType::kF32, {1, 1, 16}),
                         c.input(DType::kF32, {1, 1, 16}), c.input(DType::kF16, {2, 4, 1, 16}),
                         c.input(DType::kF16, {2, 4, 1, 16}), c.i32_values({1}, {3}), c.i32_values({2}, {0, 1}),
                         c.i32_values({1}, {6}), c.i32_values({1, 2}, {0, 7})},
                        AttentionParams{});
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("block_tables"), std::string::npos) << s.message();
}

TEST(CpuKernels, SupportsExactlyTheImplementedDtypes) {
  EXPECT_TRUE(kernels_support(OpKind::kMatmul, DType::kBF16, DType::kQ4_1));
  EXPECT_TRUE(kernels_support(OpKind::kAttention, DType::kF16, DType::kBF16));
  EXPECT_FALSE(kernels_support(OpKind::kMatmul, DType::kF32, DType::kI8));
  EXPECT_FALSE(kernels_support(OpKind::kMatmul, DType::kQ4_0, DType::kQ4_0));  // quantised activations
  EXPECT_FALSE(kernels_support(OpKind::kAttention, DType::kF32, DType::kQ8_0));
  EXPECT_FALSE(kernels_support(OpKind::kCast, DType::kF32, DType::kI32));
}

}  // namespace
}  // namespace tessera::cpu

// The CPU kernels under every SIMD target Highway can dispatch to here (SCALAR included, which
// the conformance suite never reaches on an AVX2 machine), on shapes large enough to take the
// threaded, tiled and oneDNN paths, and with bad data-dependent inputs.
#include <gtest/gtest.h>

#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/cpu_device.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_amx.h"
#include "tests/conformance/harness.h"
#include "tests/support/test_support.h"

namespace tessera::cpu {
namespace {

using conformance::Case;
using conformance::CaseContext;
using V = std::vector<ValueId>;

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (auto fn : {conformance::linear_cases, conformance::pointwise_cases, conformance::attention_cases,
                  conformance::moe_cases, conformance::recurrent_cases, conformance::lora_cases})
    for (Case& c : fn()) out.push_back(std::move(c));
  return out;
}

// Shapes past the thresholds where kernels switch strategy: N split across threads (decode),
// M x N tiles (prefill), oneDNN (f32, M >= 16), a long context attention run on the pool. The
// decode GEMV works in groups of 8 blocks: K = 864 (27 blocks of 32) leaves an odd tail.
std::vector<Case> large_cases() {
  std::vector<Case> cases;
  uint64_t seed = 9000;
  for (DType w : conformance::all_weight_dtypes())
    for (auto [M, N, K0] : {std::tuple<int64_t, int64_t, int64_t>{1, 1000, 512}, {1, 37, 864}, {70, 300, 256}, {20, 257, 320}}) {
      const int64_t K = conformance::fit_k(w, K0);
      cases.push_back({std::string("large matmul/w=") + dtype_name(w) + "/M=" + std::to_string(M), OpKind::kMatmul,
                       DType::kF32, w, ++seed, [=](CaseContext& c) {
                         return V{c.graph().matmul(c.input(DType::kF32, {M, K}), c.input(w, {N, K}))};
                       }});
    }
  // Weights repacked by prepare_weight (row tiles for Q4_0/Q4_1/Q8_0/Q4_K/Q6_K): decode and
  // batched decode (N split), prefill M x N units with M and tile tails, and a 512-row prefill.
  // K rounds up to whole super-blocks for the K-quants (864 -> 1024: an odd tail of tiles).
  for (DType w : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K})
    for (auto [M, N, K0] : {std::tuple<int64_t, int64_t, int64_t>{1, 1008, 512}, {1, 48, 864}, {5, 400, 256},
                            {70, 304, 256}, {129, 80, 320}, {512, 48, 128}, {3, 16, 768}}) {
      const int64_t K = conformance::fit_k(w, K0);
      cases.push_back({std::string("large prepared matmul/w=") + dtype_name(w) + "/M=" + std::to_string(M),
                       OpKind::kMatmul, DType::kF32, w, ++seed, [=](CaseContext& c) {
                         return V{c.graph().matmul(c.input(DType::kF32, {M, K}), c.prepared_weight(w, {N, K}))};
                       }});
    }
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
  // The machine's targets, read before forcing any: once forced, SupportedTargets() reports
  // only the forced one, and every later target of the list would be skipped.
  const int64_t supported = hwy::SupportedTargets();
  for (int64_t target : targets) {
    // SCALAR is the fallback every dispatch table has, whatever SupportedTargets reports.
    if (target != HWY_SCALAR && !(supported & target)) continue;
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

// Turns the AMX path on or off for a scope, then back to what TESSERA_CPU_AMX says.
struct AmxSetting {
  explicit AmxSetting(bool on) { amx_set_enabled(on); }
  ~AmxSetting() {
    const char* e = std::getenv("TESSERA_CPU_AMX");
    amx_set_enabled(e && std::string(e) == "1");
  }
  AmxSetting(const AmxSetting&) = delete;
  AmxSetting& operator=(const AmxSetting&) = delete;
};

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

// Every code of every block format decodes as the reference says: x = rows of the identity
// (one-hot activations quantise exactly), so out[m, n] = w[n, m], compared element by element.
// Weights are quantised from heavy-tailed random data so codes span their whole range.
TEST(CpuKernels, OneHotRowsReadBackEveryWeightElement) {
  const int64_t N = 24;
  for (DType w : conformance::all_weight_dtypes()) {
    if (!dtype_traits(w).is_quantized) continue;
    const int64_t K = conformance::fit_k(w, 64);
    testing::Rng rng(77);
    std::vector<float> wf = testing::random_floats(rng, N * K, -1.0f, 1.0f);
    for (size_t i = 0; i < wf.size(); i += 7) wf[i] *= 9.0f;  // outliers widen the scales
    std::vector<float> eye(size_t(K * K), 0.0f);
    for (int64_t k = 0; k < K; ++k) eye[size_t(k * K + k)] = 1.0f;
    CpuDevice dev(2);
    CaseContext c(dev, 1);
    const ValueId wt = c.input_values(w, {N, K}, wf);
    const ValueId y = c.graph().matmul(c.input_values(DType::kF32, {K, K}, eye), wt);
    c.graph().mark_output(y);
    ASSERT_TRUE(c.status().ok()) << c.status().to_string();
    ASSERT_TRUE(dev.compute(c.graph()).ok()) << dtype_name(w);
    const std::vector<double> got = testing::download_values(dev, c.graph().tensor(y));
    const std::vector<double> wdq = testing::download_values(dev, c.graph().tensor(wt));  // reference dequantisation
    ASSERT_EQ(got.size(), size_t(K * N));
    // Formats with a min or zero point subtract it in f32 (dx * sum(qx) times the min), which
    // leaves a rounding residue of ~1e-7 of the row's magnitude; a wrong code is off by a whole
    // step (>= 1/64 of it).
    std::vector<double> row_max(size_t(N), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) row_max[size_t(n)] = std::max(row_max[size_t(n)], std::fabs(wdq[size_t(n * K + k)]));
    int bad = 0;
    for (int64_t k = 0; k < K && bad < 5; ++k)
      for (int64_t n = 0; n < N && bad < 5; ++n) {
        const double want = wdq[size_t(n * K + k)], have = got[size_t(k * N + n)];
        if (std::fabs(have - want) > 1e-6 * row_max[size_t(n)]) {
          ++bad;
          ADD_FAILURE() << dtype_name(w) << ": w[" << n << ", " << k << "] reads " << have << ", reference " << want;
        }
      }
  }
}

// The decode GEMV (M = 1) has its own loops per format (pair, group and NVFP4 paths); the
// tiled path (M > 1) decodes with the per-block decoders. Both see the same int8 activations, so
// row 0 of an M = 5 product must equal the M = 1 product up to f32 rounding, for weights from
// random data and for raw bytes the quantisers never write: every NVFP4 scale byte (0x7F reads
// as 0, 0xFF as 480, subnormals) and INT4_G32 blocks with a nonzero reserved byte. K leaves an
// odd 64-block (NVFP4) and a tail of blocks short of 8.
TEST(CpuKernels, DecodeGemvMatchesTheTiledPath) {
  const int64_t N = 40;
  for (DType w : conformance::all_weight_dtypes()) {
    if (!dtype_traits(w).is_quantized) continue;
    const int64_t K = conformance::fit_k(w, 64 * 13);
    testing::Rng rng(31);
    const Tensor desc = Tensor::make(w, {N, K});
    std::vector<uint8_t> bytes = testing::encode(desc, testing::outlier_floats(rng, N * K));
    if (w == DType::kNVFP4) {
      for (size_t b = 0; b < bytes.size(); b += 36)
        for (int j = 0; j < 4; ++j) bytes[b + j] = uint8_t(rng() % 256);
      bytes[0] = 0x7f, bytes[1] = 0xff, bytes[2] = 0x03, bytes[3] = 0x80;
    }
    if (w == DType::kINT4_G32)
      for (size_t b = 0; b < bytes.size(); b += 20) bytes[b + 3] = uint8_t(1 + rng() % 255);
    CpuDevice dev(2);
    auto wt = upload_new(dev, desc, bytes.data());
    ASSERT_TRUE(wt.ok()) << wt.status().to_string();
    const std::vector<float> xs = testing::random_floats(rng, 5 * K);
    std::vector<double> rows[2];
    for (int64_t M : {int64_t(1), int64_t(5)}) {
      auto x = upload_new(dev, Tensor::make(DType::kF32, {M, K}), xs.data());
      ASSERT_TRUE(x.ok());
      Graph g;
      const ValueId y = g.matmul(g.input(*x), g.input(*wt));
      g.mark_output(y);
      ASSERT_TRUE(dev.compute(g).ok()) << dtype_name(w);
      rows[M > 1] = testing::download_values(dev, g.tensor(y));
    }
    double scale = 0;
    for (int64_t n = 0; n < N; ++n) scale = std::max(scale, std::fabs(rows[1][size_t(n)]));
    for (int64_t n = 0; n < N; ++n)
      ASSERT_NEAR(rows[0][size_t(n)], rows[1][size_t(n)], 1e-5 * scale) << dtype_name(w) << " row " << n;
  }
}

// matmul reuses the activations packed for the previous matmul when the next reads the same
// value in the same run (q/k/v of one input): every product still equals the same matmul alone,
// a different value of the same shape is packed afresh, and so is the same value on the next run
// after its content changed.
TEST(CpuKernels, MatmulsOfOneInputShareItsPackedActivationsWithinARunOnly) {
  const int64_t M = 37, K = 256;
  testing::Rng rng(77);
  CpuDevice dev(2);
  std::vector<Tensor> ws;
  for (DType w : {DType::kQ4_0, DType::kQ8_0, DType::kF32, DType::kQ4_K, DType::kQ4_0}) {
    const Tensor desc = Tensor::make(w, {48, K});
    const std::vector<uint8_t> bytes = testing::encode(desc, testing::random_floats(rng, 48 * K));
    auto wt = upload_new(dev, desc, bytes.data());
    ASSERT_TRUE(wt.ok()) << wt.status().to_string();
    auto prepared = dev.prepare_weight(*wt, OpKind::kMatmul);  // row tiles for Q4_0/Q8_0/Q4_K on x86-64
    ASSERT_TRUE(prepared.ok());
    ws.push_back(*prepared);
  }
  auto x = upload_new(dev, Tensor::make(DType::kF32, {M, K}), testing::random_floats(rng, M * K).data());
  auto x2 = upload_new(dev, Tensor::make(DType::kF32, {M, K}), testing::random_floats(rng, M * K).data());
  ASSERT_TRUE(x.ok() && x2.ok());
  auto alone = [&](const Tensor& in, const Tensor& w) {
    Graph g;
    const ValueId y = g.matmul(g.input(in), g.input(w));
    g.mark_output(y);
    EXPECT_TRUE(dev.compute(g).ok());
    return testing::download_values(dev, g.tensor(y));
  };
  Graph g;
  const ValueId xv = g.input(*x), x2v = g.input(*x2);
  std::vector<ValueId> ys;
  for (const Tensor& w : ws) ys.push_back(g.matmul(xv, g.input(w)));
  ys.push_back(g.matmul(x2v, g.input(ws[0])));  // same shape and dtype, another value
  ys.push_back(g.matmul(xv, g.input(ws[4])));
  for (ValueId y : ys) g.mark_output(y);
  auto references = [&] {
    std::vector<std::vector<double>> want;
    for (size_t i = 0; i < ys.size(); ++i)
      want.push_back(i == ws.size() ? alone(*x2, ws[0]) : alone(*x, ws[i == ws.size() + 1 ? 4 : i]));
    return want;
  };
  auto outputs = [&] {
    std::vector<std::vector<double>> got;
    for (ValueId y : ys) got.push_back(testing::download_values(dev, g.tensor(y)));
    return got;
  };
  const auto want0 = references();
  ASSERT_TRUE(dev.compute(g).ok());
  const auto got0 = outputs();
  // New content in the same buffer, and the same graph again with nothing run in between.
  const std::vector<float> fresh = testing::random_floats(rng, M * K);
  std::memcpy(x->host_data(), fresh.data(), fresh.size() * 4);
  ASSERT_TRUE(dev.compute(g).ok());
  const auto got1 = outputs();
  const auto want1 = references();
  for (size_t i = 0; i < ys.size(); ++i) {
    ASSERT_EQ(got0[i], want0[i]) << "first run, matmul " << i;
    ASSERT_EQ(got1[i], want1[i]) << "second run, matmul " << i;
  }
  EXPECT_NE(got0[0], got1[0]);
}

// prepare_weight repacks Q4_0/Q4_1/Q8_0/Q4_K/Q6_K weights whose N is a multiple of 16 into row tiles (on
// x86-64) and keeps every other weight; under every SIMD target the tiled kernels agree with the
// row kernels up to f32 rounding (both see the same int8 activations): decode, a batch, prefill.
// AMX is off here: it takes prefill at a row count that depends on the layout, in bf16
// (AmxPrefillMatchesTheExactProduct tests it).
TEST(CpuKernels, PreparedTilesMatchTheRowKernels) {
  const AmxSetting amx_off(false);  // should TESSERA_CPU_AMX=1 be set
  const int64_t supported = hwy::SupportedTargets();  // before any is forced (see above)
  for (int64_t target : {HWY_AVX3_DL, HWY_AVX3, HWY_AVX2, HWY_SCALAR}) {
    if (target != HWY_SCALAR && !(supported & target)) continue;
    hwy::SetSupportedTargetsForTest(target);
    for (DType w : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K})
    for (auto [N, K0] : {std::pair<int64_t, int64_t>{48, 320}, {576, 1536}}) {
      const int64_t K = conformance::fit_k(w, K0);
      testing::Rng rng(77);
      const Tensor desc = Tensor::make(w, {N, K});
      const std::vector<uint8_t> bytes = testing::encode(desc, testing::outlier_floats(rng, N * K));
      CpuDevice dev(2);
      auto rows = upload_new(dev, desc, bytes.data());
      ASSERT_TRUE(rows.ok()) << rows.status().to_string();
      auto tiles = dev.prepare_weight(*rows, OpKind::kMatmul);
      ASSERT_TRUE(tiles.ok()) << tiles.status().to_string();
#if defined(__x86_64__)
      ASSERT_EQ(tiles->layout, WeightLayout::kCpuTile16) << dtype_name(w);
      ASSERT_NE(tiles->buffer, rows->buffer);
#endif
      auto odd = upload_new(dev, Tensor::make(w, {N - 8, K}), bytes.data());
      ASSERT_TRUE(odd.ok());
      EXPECT_EQ(dev.prepare_weight(*odd, OpKind::kMatmul)->layout, WeightLayout::kRows);
      EXPECT_EQ(dev.prepare_weight(*rows, OpKind::kMatmulId)->layout, WeightLayout::kRows);
      for (int64_t M : {int64_t(1), int64_t(6), int64_t(70), int64_t(200)}) {
        const std::vector<float> xs = testing::random_floats(rng, M * K);
        auto x = upload_new(dev, Tensor::make(DType::kF32, {M, K}), xs.data());
        ASSERT_TRUE(x.ok());
        std::vector<double> got[2];
        for (int i = 0; i < 2; ++i) {
          Graph g;
          const ValueId y = g.matmul(g.input(*x), g.input(i ? *tiles : *rows));
          g.mark_output(y);
          ASSERT_TRUE(dev.compute(g).ok());
          got[i] = testing::download_values(dev, g.tensor(y));
        }
        double scale = 0;
        for (double v : got[0]) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < got[0].size(); ++i)
          ASSERT_NEAR(got[0][i], got[1][i], 1e-5 * scale)
              << hwy::TargetName(target) << " " << dtype_name(w) << " M=" << M << " N=" << N << " K=" << K << " element " << i
              << " scale " << scale;
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Q4_1's min term (m * sum(x)) nearly cancels d * sum(q * x) when the activations have a large
// mean (SwiGLU outputs, outlier channels): the tiled kernel must stay as close as the row kernel
// to the exact product of the same int8 activations and the dequantised weights.
TEST(CpuKernels, PreparedTilesAreAsAccurateAsRows) {
  const int64_t N = 64, K = 1536, M = 8;
  for (DType w : {DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    testing::Rng rng(13);
    const Tensor desc = Tensor::make(w, {N, K});
    const std::vector<uint8_t> bytes = testing::encode(desc, testing::outlier_floats(rng, N * K));
    std::vector<float> xs = testing::random_floats(rng, M * K, 0.0f, 2.0f);
    for (int64_t i = 0; i < M * K; i += 97) xs[size_t(i)] *= 60.0f;  // outlier channels
    CpuDevice dev(2);
    auto rows = upload_new(dev, desc, bytes.data());
    ASSERT_TRUE(rows.ok());
    auto tiles = dev.prepare_weight(*rows, OpKind::kMatmul);
    ASSERT_TRUE(tiles.ok());
    auto x = upload_new(dev, Tensor::make(DType::kF32, {M, K}), xs.data());
    ASSERT_TRUE(x.ok());
    std::vector<double> got[2];
    for (int i = 0; i < 2; ++i) {
      Graph g;
      const ValueId y = g.matmul(g.input(*x), g.input(i ? *tiles : *rows));
      g.mark_output(y);
      ASSERT_TRUE(dev.compute(g).ok());
      got[i] = testing::download_values(dev, g.tensor(y));
    }
    std::vector<float> wd(size_t(N * K));
    for (int64_t n = 0; n < N; ++n) dtype_traits(w).dequantize_row(bytes.data() + n * desc.row_bytes(), &wd[size_t(n * K)], K);
    std::vector<ActQ8> xq(size_t(K / 32));
    double err[2] = {0, 0};
    for (int64_t m = 0; m < M; ++m) {
      quantize_act_q8(&xs[size_t(m * K)], xq.data(), K);
      for (int64_t n = 0; n < N; ++n) {
        double want = 0;
        for (int64_t k = 0; k < K; ++k) want += double(wd[size_t(n * K + k)]) * xq[size_t(k / 32)].d * xq[size_t(k / 32)].qs[k % 32];
        for (int i = 0; i < 2; ++i) err[i] = std::max(err[i], std::fabs(got[i][size_t(m * N + n)] - want));
      }
    }
    EXPECT_LE(err[1], 2 * err[0] + 1e-6) << dtype_name(w) << ": tiles " << err[1] << ", rows " << err[0];
    std::printf("%s: max abs error vs exact, rows %.3g, tiles %.3g\n", dtype_name(w), err[0], err[1]);
  }
}

TEST(CpuKernels, ClaimsEveryWeightFormatForTheWeightOps) {
  for (DType w : conformance::all_weight_dtypes())
    for (OpKind op : {OpKind::kEmbed, OpKind::kMatmul, OpKind::kMatmulId})
      for (DType a : conformance::activation_dtypes())
        EXPECT_TRUE(kernels_support(op, a, w)) << op_name(op) << " " << dtype_name(a) << " x " << dtype_name(w);
}

TEST(CpuKernels, SupportsExactlyTheImplementedDtypes) {
  EXPECT_TRUE(kernels_support(OpKind::kMatmul, DType::kBF16, DType::kQ4_1));
  EXPECT_TRUE(kernels_support(OpKind::kAttention, DType::kF16, DType::kBF16));
  EXPECT_FALSE(kernels_support(OpKind::kMatmul, DType::kF32, DType::kI8));
  EXPECT_FALSE(kernels_support(OpKind::kMatmul, DType::kQ4_0, DType::kQ4_0));  // quantised activations
  EXPECT_FALSE(kernels_support(OpKind::kAttention, DType::kF32, DType::kQ8_0));
  EXPECT_FALSE(kernels_support(OpKind::kCast, DType::kF32, DType::kI32));
}


// On a CPU with AMX, prefill (M >= amx_min_rows) runs in bf16 on the tile unit: the tiled formats
// decode their tiles, every other block format its rows. Both must stay within bf16 rounding of
// the exact product (NMSE ~2.5e-6 expected from rounding x and w to 8 bits of mantissa), and the
// graph's matmul must be exactly gemm_amx (so the path under test is the one that runs). N = 48
// takes one 32-column panel and one 16-column tail; M = 270 eight full strips and a partial one.
TEST(CpuKernels, AmxPrefillMatchesTheExactProduct) {
  if (!amx_present()) TESSERA_SKIP_HARDWARE() << "this CPU has no AMX-BF16";
  const AmxSetting amx_on(true);  // off by default (matmul_amx.h)
  ASSERT_TRUE(amx_usable()) << "AMX present but unusable: the kernel refused the tile state";
  const int64_t M = 270, N = 48;
  static_assert(M >= kAmxMinRowsTiled && M >= kAmxMinRowsRows);
  int tested = 0;
  for (DType w : conformance::all_weight_dtypes()) {
    if (!dtype_traits(w).is_quantized) continue;
    const int64_t K = conformance::fit_k(w, 512);
    testing::Rng rng(31 + uint64_t(w));
    const Tensor desc = Tensor::make(w, {N, K});
    const std::vector<uint8_t> bytes = testing::encode(desc, testing::outlier_floats(rng, N * K));
    const std::vector<float> xs = testing::random_floats(rng, M * K);
    CpuDevice dev(2);
    auto rows = upload_new(dev, desc, bytes.data());
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    auto tiles = dev.prepare_weight(*rows, OpKind::kMatmul);
    ASSERT_TRUE(tiles.ok());
    auto x = upload_new(dev, Tensor::make(DType::kF32, {M, K}), xs.data());
    ASSERT_TRUE(x.ok());
    std::vector<float> wd(size_t(N * K));
    for (int64_t n = 0; n < N; ++n) dtype_traits(w).dequantize_row(bytes.data() + n * desc.row_bytes(), &wd[size_t(n * K)], K);
    std::vector<double> want(size_t(M * N));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(xs[size_t(m * K + k)]) * wd[size_t(n * K + k)];
        want[size_t(m * N + n)] = acc;
      }
    for (const Tensor* wt : {&*rows, &*tiles}) {
      const bool tiled = wt->layout == WeightLayout::kCpuTile16;
      if (wt == &*tiles && !tiled) continue;  // not repacked: tested as rows
      ASSERT_TRUE(amx_supports(w, tiled, N, K)) << dtype_name(w);
      Graph g;
      const ValueId y = g.matmul(g.input(*x), g.input(*wt));
      g.mark_output(y);
      ASSERT_TRUE(dev.compute(g).ok()) << dtype_name(w);
      const std::vector<double> got = testing::download_values(dev, g.tensor(y));
      const double e = testing::nmse(got, want);
      EXPECT_LT(e, 2e-5) << dtype_name(w) << (tiled ? " tiles" : " rows");
      std::vector<float> direct(size_t(M * N));
      ThreadPool pool(2);
      gemm_amx(pool, *x, M, w, static_cast<const char*>(wt->host_data()), desc.row_bytes(), tiled, N, K, direct.data(), N);
      for (size_t i = 0; i < direct.size(); ++i)
        ASSERT_EQ(float(got[i]), direct[i]) << dtype_name(w) << (tiled ? " tiles" : " rows") << " element " << i;
      std::printf("%-10s %s: NMSE vs exact %.3g\n", dtype_name(w), tiled ? "tiles" : "rows ", e);
      ++tested;
    }
  }
  EXPECT_GE(tested, 15);
}

}  // namespace
}  // namespace tessera::cpu

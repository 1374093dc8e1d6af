// matmul_id's weighted sum over the chosen experts is rounded to f32 once. With every expert a
// copy of one weight, each expert's GEMM equals the dense matmul bit for bit, so the output must
// be exactly float(sum_j double(w[t, j]) * dense[t, n]). Rounding after each term instead (an
// earlier version) differs by an ulp in many elements, and on a real model (SmolLM2 rewritten as
// a 4-expert top-2 MoE, tests/model/moe_dense_equivalence_test.cpp) the int8 activation
// quantisation of the following layers amplified that ulp to a 1.6e-2 logit difference.
// Block-format weights only: there each output row is computed alone (quantised activations,
// one dot product per row), whereas float weights round differently depending on how rows are
// grouped (4-row tiles, oneDNN from 16 rows), so an expert's rows need not equal the dense ones.
#include <gtest/gtest.h>

#include <string>

#include "backends/cpu/cpu_device.h"
#include "tests/conformance/harness.h"

namespace tessera::cpu {
namespace {

TEST(CpuMoe, WeightedSumOverIdenticalExpertsIsRoundedOnce) {
  const int64_t T = 16, K = 128, N = 64, E = 4, k = 2;
  for (DType wd : {DType::kQ4_1, DType::kQ4_0, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(wd));
    CpuDevice dev(2);
    conformance::CaseContext c(dev, 21);
    Graph& g = c.graph();
    // Activations with x100 outliers, like SmolLM2's residual stream from layer 3 on.
    const ValueId x = c.input_values(DType::kF32, {T, K}, testing::outlier_floats(c.rng(), T * K));
    const std::vector<float> w = testing::random_floats(c.rng(), N * K);
    std::vector<float> stacked;
    for (int64_t e = 0; e < E; ++e) stacked.insert(stacked.end(), w.begin(), w.end());
    TopkRouteParams p;
    p.k = k;
    p.scoring = RouteScoring::kSoftmax;
    p.renormalize = true;
    auto [ids, wts] = g.topk_route(g.matmul(x, c.input(DType::kF32, {E, K})), p);
    const ValueId dense = g.matmul(x, c.input_values(wd, {N, K}, w));
    const ValueId moe = g.matmul_id(x, c.input_values(wd, {E, N, K}, stacked), ids, wts);
    for (ValueId v : {dense, moe, wts}) g.mark_output(v);
    ASSERT_TRUE(c.status().ok()) << c.status().to_string();
    const Status s = dev.compute(g);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const auto yd = testing::download_values(dev, g.tensor(dense));
    const auto ym = testing::download_values(dev, g.tensor(moe));
    const auto rw = testing::download_values(dev, g.tensor(wts));
    int64_t mismatches = 0, first = -1;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0.0;
        for (int64_t j = 0; j < k; ++j) sum += rw[size_t(t * k + j)] * yd[size_t(t * N + n)];
        if (float(sum) != float(ym[size_t(t * N + n)]) && mismatches++ == 0) first = t * N + n;
      }
    EXPECT_EQ(mismatches, 0) << "of " << T * N << " outputs differ from the once-rounded weighted sum; first at "
                             << first;
  }
}

}  // namespace
}  // namespace tessera::cpu

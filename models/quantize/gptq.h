// GPTQ (Frantar et al., "GPTQ: Accurate Post-Training Quantization for Generative Pre-trained
// Transformers", 2022): quantises a linear weight W [N, K] column by column, pushing each
// column's rounding error onto the columns not yet quantised so that the layer's output on the
// calibration inputs, X W^T, moves as little as possible. The inputs enter only through
// H = sum over tokens of x x^T (K x K), collected by models/quantize/calibrate.h.
//
// Per format: the row-scaled formats (fp8_e4m3/e5m2, int8_pc) fix each row's scale up front from
// the row as it is, then round every column on its own to that grid. Block formats fit each
// block's parameters (with the reference quantiser) when the sweep reaches the block, from the
// error-updated weights, and then round its columns one at a time with those parameters
// (q8_0, q4_0, q4_1, q5_0, q5_1, int4_g*). Formats without a per-element rounding hook here
// (q4_k, q5_k, q6_k, mxfp4, nvfp4) quantise the whole block with the reference at that point and
// push the error of each of its columns onward.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/status.h"
#include "quant/dtype.h"

namespace tessera {

// H = sum over tokens of x x^T for one weight's input (x has k elements). Weights that read the
// same input (q/k/v, gate/up) share one.
struct Hessian {
  int64_t k = 0;
  int64_t tokens = 0;
  std::vector<double> h;  // [k, k], symmetric
  explicit Hessian(int64_t k_) : k(k_), h(size_t(k_ * k_), 0.0) {}
  // Adds the rows of x [n, k] (scalar, for tests and small inputs).
  void add_rows(const float* x, int64_t n);
};

// The upper-triangular U with U^T U = (H + damp I)^-1, damp = |damp_frac| * mean(diag H): what the
// column sweep needs. Fails (naming |what|) when H holds no data or is not positive definite even
// after raising the damping a few times.
struct GptqFactor {
  int64_t k = 0;
  double damp = 0;        // the damping actually added
  std::vector<float> u;   // [k, k] row-major, upper triangle (the lower one is zero)
};
Result<GptqFactor> gptq_factor(const Hessian& h, const std::string& what, double damp_frac = 0.01, int threads = 1);

// Whether gptq_quantize accepts |t| at all (every quantised format with a reference quantiser).
bool gptq_supports(DType t);

// Quantises W [n, k] (row-major f32; it is modified: it ends holding the error-updated weights)
// into |dst| (n rows of dtype_row_bytes(t, k) bytes) with GPTQ. |progress| (may be null) gets the
// rows finished so far, from one thread at a time. k must fill whole blocks of |t|.
Status gptq_quantize(DType t, const GptqFactor& f, float* w, int64_t n, int64_t k, uint8_t* dst, int threads,
                     const std::function<void(int64_t)>& progress = nullptr);

}  // namespace tessera

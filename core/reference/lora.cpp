// Reference lora: the multi-LoRA delta over a base projection, row by row in double. A row of a
// segment of slot a gets scale_a * B_a[:r]^T (A_a[:r] x) added to its base row (B_a is [R, N]: the
// up projection transposed); rows of the base model's segments (slot -1) are copied.
#include <string>

#include "core/reference/reference.h"

namespace tessera::ref {

Status check_lora_metadata(const Graph& g, const Node& n) {
  auto err = [](const std::string& m) { return InvalidArgument("lora: " + m); };
  const Tensor& ss = g.input_tensor(n, in::kLoraSegStart);
  const Tensor& sl = g.input_tensor(n, in::kLoraSegSlot);
  const Tensor& ranks = g.input_tensor(n, in::kLoraRanks);
  const int64_t T = g.input_tensor(n, in::kLoraX).shape[0], G = sl.shape[0];
  const int64_t n_slots = ranks.shape[0], R = g.input_tensor(n, in::kLoraA).shape[1];
  if (load_i32(ss, 0) != 0) return err("seg_start[0] must be 0");
  if (load_i32(ss, G) != T)
    return err("seg_start[G] = " + std::to_string(load_i32(ss, G)) + " != T = " + std::to_string(T));
  for (int64_t s = 0; s < G; ++s) {
    if (load_i32(ss, s + 1) < load_i32(ss, s)) return err("seg_start decreases at segment " + std::to_string(s));
    const int32_t slot = load_i32(sl, s);
    if (slot < -1 || slot >= n_slots)
      return err("segment " + std::to_string(s) + " names slot " + std::to_string(slot) + " outside [-1, " +
                 std::to_string(n_slots) + ")");
  }
  for (int64_t a = 0; a < n_slots; ++a) {
    const int32_t r = load_i32(ranks, a);
    if (r < 0 || r > R)
      return err("slot " + std::to_string(a) + " has rank " + std::to_string(r) + " outside [0, " + std::to_string(R) +
                 "]");
  }
  return OkStatus();
}

Status lora(const Graph& g, const Node& n) {
  TS_RETURN_IF_ERROR(check_lora_metadata(g, n));
  const Tensor& x = g.input_tensor(n, in::kLoraX);
  const Tensor& base = g.input_tensor(n, in::kLoraBase);
  const Tensor& A = g.input_tensor(n, in::kLoraA);
  const Tensor& B = g.input_tensor(n, in::kLoraB);
  const Tensor& ranks = g.input_tensor(n, in::kLoraRanks);
  const Tensor& scales = g.input_tensor(n, in::kLoraScales);
  const Tensor& ss = g.input_tensor(n, in::kLoraSegStart);
  const Tensor& sl = g.input_tensor(n, in::kLoraSegSlot);
  const Tensor& out = g.output_tensor(n);
  const int64_t R = A.shape[1], N = B.shape[2], G = sl.shape[0];
  const std::vector<double> scale = load_row(scales, 0);
  for (int64_t s = 0; s < G; ++s) {
    const int32_t slot = load_i32(sl, s);
    for (int64_t t = load_i32(ss, s); t < load_i32(ss, s + 1); ++t) {
      std::vector<double> y = load_row(base, t);
      if (slot >= 0) {
        const int64_t r = load_i32(ranks, slot);
        const std::vector<double> xv = load_row(x, t);
        std::vector<double> h(size_t(r), 0.0);  // shrink: A_a[:r] x
        for (int64_t j = 0; j < r; ++j) {
          const std::vector<double> arow = load_row(A, slot * R + j);
          for (size_t k = 0; k < xv.size(); ++k) h[size_t(j)] += arow[k] * xv[k];
        }
        std::vector<double> acc(size_t(N), 0.0);  // expand: B_a[:r]^T h
        for (int64_t j = 0; j < r; ++j) {
          const std::vector<double> brow = load_row(B, slot * R + j);
          for (int64_t i = 0; i < N; ++i) acc[size_t(i)] += brow[size_t(i)] * h[size_t(j)];
        }
        for (int64_t i = 0; i < N; ++i) y[size_t(i)] += scale[size_t(slot)] * acc[size_t(i)];
      }
      store_row(out, t, y.data());
    }
  }
  return OkStatus();
}

}  // namespace tessera::ref

// embed: out[t, :] = dequantise(weight[ids[t], :]). A row gather; ids are checked first so a bad
// token id is an InvalidArgument, never an out-of-bounds read.
#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/reference/reference.h"

namespace tessera::cpu {

Status embed(ThreadPool& pool, const Graph& g, const Node& n) {
  const Tensor& w = g.input_tensor(n, in::kEmbedWeight);
  const Tensor& ids = g.input_tensor(n, in::kEmbedIds);
  const Tensor& out = g.output_tensor(n);
  const int64_t T = ids.shape[0], V = w.shape[0], D = w.shape[1];
  std::vector<int32_t> rows(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    rows[size_t(t)] = ref::load_i32(ids, t);
    if (rows[size_t(t)] < 0 || rows[size_t(t)] >= V)
      return InvalidArgument("embed: id " + std::to_string(rows[size_t(t)]) + " at row " + std::to_string(t) +
                             " outside [0, " + std::to_string(V) + ")");
  }
  const auto& tr = dtype_traits(w.dtype);
  const int64_t grain = std::max<int64_t>(1, kParallelMinElems / std::max<int64_t>(1, D));
  pool.parallel_for(T, grain, [&](int64_t t0, int64_t t1, int) {
    float* tmp = thread_scratch(0, D);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r = rows[size_t(t)];
      if (tr.is_quantized) {
        tr.dequantize_row(static_cast<const char*>(w.host_data()) + w.row_offset(r), tmp, D);
        store_row_f32(out, t, tmp);
      } else {
        store_row_f32(out, t, load_row_f32(w, r, tmp));
      }
    }
  });
  return OkStatus();
}

}  // namespace tessera::cpu

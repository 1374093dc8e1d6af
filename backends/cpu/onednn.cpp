#include "backends/cpu/onednn.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include <oneapi/dnnl/dnnl.hpp>

namespace tessera::cpu {

namespace {
struct Engine {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mu;
  // Primitive creation costs far more than a small GEMM: one per shape, kept.
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, dnnl::matmul> cache;
};
Engine& engine() {
  static Engine e;
  return e;
}
bool disabled() {
  static const bool off = [] {
    const char* v = std::getenv("TESSERA_NO_ONEDNN");
    return v && *v && *v != '0';
  }();
  return off;
}
}  // namespace

bool onednn_gemm(const PackedAct& act, const WeightMat& w, float* out, int64_t ldo) {
  if (disabled() || act.quantized || w.dtype != DType::kF32 || act.M < kOneDnnMinRows || w.row_stride % 4 != 0 ||
      w.N * w.K < (1 << 16))
    return false;
  using dt = dnnl::memory::data_type;
  const int64_t M = act.M, N = w.N, K = w.K, ldw = w.row_stride / 4;
  try {
    Engine& e = engine();
    std::lock_guard<std::mutex> lock(e.mu);
    const dnnl::memory::desc src({M, K}, dt::f32, dnnl::memory::dims{K, 1});
    const dnnl::memory::desc wei({K, N}, dt::f32, dnnl::memory::dims{1, ldw});  // w^T seen through strides
    const dnnl::memory::desc dst({M, N}, dt::f32, dnnl::memory::dims{ldo, 1});
    const auto key = std::make_tuple(M, N, K, ldw, ldo);
    auto it = e.cache.find(key);
    if (it == e.cache.end()) {
      // Prefill chunks vary M; bound the cache rather than keep every shape ever seen.
      if (e.cache.size() >= 64) e.cache.clear();
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), e.engine);
      it = e.cache.emplace(key, dnnl::matmul(pd)).first;
    }
    dnnl::memory src_mem(src, e.engine, const_cast<float*>(act.f32.data()));
    dnnl::memory wei_mem(wei, e.engine, const_cast<char*>(w.base));
    dnnl::memory dst_mem(dst, e.engine, out);
    it->second.execute(e.stream, {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_WEIGHTS, wei_mem}, {DNNL_ARG_DST, dst_mem}});
    e.stream.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace tessera::cpu

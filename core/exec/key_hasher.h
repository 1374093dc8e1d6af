// KeyHasher: an FNV-1a style hash of what a graph bakes into a prepared executable (tensor
// shapes, strides and places, op params), for the executor's cache keys (graph_key) and the
// model's kept step graphs (Model::step_graph).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <variant>

#include "core/graph.h"

namespace tessera {

class KeyHasher {
 public:
  void mix(uint64_t x) { h_ = (h_ ^ x) * 1099511628211ull; }
  void mix_float(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    mix(bits);
  }
  void mix_tensor(const Tensor& t) {
    mix(uint64_t(t.dtype));
    mix(uint64_t(t.rank));
    mix(uint64_t(t.layout));
    for (int i = 0; i < t.rank; ++i) {
      mix(uint64_t(t.shape[size_t(i)]));
      mix(uint64_t(t.stride[size_t(i)]));
    }
  }
  // Field by field: hashing a params struct's bytes would hash its padding too.
  void mix_params(const OpParams& p) {
    mix(p.index());
    std::visit(
        [this](const auto& v) {
          using P = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<P, RmsNormParams> || std::is_same_v<P, LayerNormParams>) mix_float(v.eps);
          if constexpr (std::is_same_v<P, ScaleParams> || std::is_same_v<P, SoftmaxParams>) mix_float(v.scale);
          if constexpr (std::is_same_v<P, ScaleParams>) mix_float(v.softcap);
          if constexpr (std::is_same_v<P, GluParams>) {
            mix(uint64_t(v.kind));
            mix_float(v.alpha);
            mix_float(v.limit);
          }
          if constexpr (std::is_same_v<P, CastParams>) mix(uint64_t(v.to));
          if constexpr (std::is_same_v<P, RopeParams>) {
            mix(uint64_t(v.n_dims));
            mix(uint64_t(v.mode));
            for (float f : {v.freq_base, v.freq_scale, v.ext_factor, v.attn_factor, v.beta_fast, v.beta_slow}) mix_float(f);
            mix(uint64_t(v.n_ctx_orig));
          }
          if constexpr (std::is_same_v<P, AttentionParams>) {
            mix_float(v.scale);
            mix(uint64_t(v.sliding_window));
            mix_float(v.softcap);
            mix(uint64_t(v.causal));
          }
          if constexpr (std::is_same_v<P, TopkRouteParams>) {
            mix(uint64_t(v.k));
            mix(uint64_t(v.scoring));
            mix(uint64_t(v.renormalize));
            mix(uint64_t(v.n_groups));
            mix(uint64_t(v.topk_groups));
            mix_float(v.weight_scale);
          }
          if constexpr (std::is_same_v<P, ViewParams>) mix(uint64_t(v.byte_offset));
          if constexpr (std::is_same_v<P, SsmConvParams>) mix(uint64_t(v.silu));
          if constexpr (std::is_same_v<P, GatedDeltaNetParams>) {
            mix_float(v.q_scale);
            mix(uint64_t(v.l2_norm));
            mix_float(v.eps);
            mix(uint64_t(v.tiled_heads));
          }
        },
        p);
  }
  // Where |t| lives: its buffer (by address) and offset.
  void mix_place(const Tensor& t) {
    mix(reinterpret_cast<uintptr_t>(t.buffer.get()));
    mix(uint64_t(t.offset));
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

// Params that grow a field must grow the hash too: this fails to compile when one is added.
static_assert(std::variant_size_v<OpParams> == 13, "KeyHasher::mix_params: hash the new op params");

}  // namespace tessera

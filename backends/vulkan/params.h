// The params structs of the compute shaders (shaders/*.comp), laid out exactly as their std430
// blocks: the host writes one per dispatch into the params ring and passes its device address
// in the push constants (lavapipe allows only 128 bytes of push constants, less than
// attention's ten tensor addresses). Keep each in sync with its shader; the sizes are asserted.
#pragma once
#include <cstdint>

namespace tessera::vulkan {

// A tensor seen as rows of its last dimension (types.glsl TensorRef).
struct TensorRef {
  uint64_t addr = 0;       // device address of element 0
  uint32_t shape[3] = {1, 1, 1};   // leading dims, outermost first, padded with 1s in front
  uint32_t stride[3] = {0, 0, 0};  // bytes
  uint32_t col_stride = 0;  // bytes between elements of the last dim (0 for block formats)
  uint32_t dtype = 0;       // tessera::DType value
};
static_assert(sizeof(TensorRef) == 40);

// elementwise.comp
struct EltParams {
  TensorRef a, b;
  uint64_t dst = 0;
  uint32_t rows = 0, cols = 0;
  uint32_t out_dtype = 0;
  float scale = 1.0f;  // scale; swiglu_oai: alpha
  uint32_t b_rows = 1;
  float limit = 0.0f;    // swiglu_oai
  float softcap = 0.0f;  // scale: > 0 caps y to softcap * tanh(y / softcap)
};
static_assert(sizeof(EltParams) == 120);

// norm.comp (rms_norm, layer_norm, softmax)
struct NormParams {
  TensorRef x, w, b;
  uint64_t dst = 0;
  uint32_t rows = 0, cols = 0;
  uint32_t out_dtype = 0;
  float eps_or_scale = 0.0f;
  uint32_t has_w = 0;
  uint32_t has_b = 0;
};
static_assert(sizeof(NormParams) == 152);

// rope.comp
struct RopeParams {
  TensorRef x;
  uint64_t pos = 0, freq_factors = 0, inv_freq = 0, dst = 0;
  uint32_t rows = 0, H = 0, D = 0, n_dims = 0;
  uint32_t neox = 0, out_dtype = 0;
  float freq_scale = 1.0f, ext_factor = 0.0f;
  float mscale = 1.0f;
  float corr_lo = 0.0f, corr_hi = 0.0f;
  uint32_t pad = 0;
};
static_assert(sizeof(RopeParams) == 120);

// embed.comp
struct EmbedParams {
  TensorRef w;
  uint64_t ids = 0, dst = 0;
  uint32_t T = 0, D = 0, V = 0, out_dtype = 0;
};
static_assert(sizeof(EmbedParams) == 72);

// matmul.comp (matmul and matmul_id)
inline constexpr uint32_t kMatmulBias = 1, kMatmulIds = 2, kMatmulWeighted = 4, kMatmulXPerSlot = 8, kMatmulXF32Aligned = 16;
struct MatmulParams {
  TensorRef x, w;
  uint64_t bias = 0, ids = 0, weights = 0, dst = 0;
  uint32_t M = 0, N = 0, K = 0;
  uint32_t k_slots = 1, n_experts = 1;
  uint32_t flags = 0;
  uint32_t bias_dtype = 0, out_dtype = 0;
};
static_assert(sizeof(MatmulParams) == 144);

// attention.comp (both stages)
struct AttnParams {
  TensorRef q, k, v, kc, vc;
  uint64_t slots = 0, query_start = 0, seq_lens = 0, tables = 0, dst = 0;
  uint32_t T = 0, Hq = 0, Hkv = 0, D = 0;
  uint32_t block_size = 0, n_blocks = 0, S = 0, max_blocks = 0;
  float scale = 1.0f, softcap = 0.0f;
  int32_t window = 0;
  uint32_t out_dtype = 0;
  uint32_t causal = 1;
  uint32_t pad = 0;
  uint64_t sinks = 0;  // [Hq] f32 sink logits (gpt-oss); 0: none
};
static_assert(sizeof(AttnParams) == 304);

// topk.comp
struct TopkParams {
  TensorRef logits;
  uint64_t bias = 0, ids_out = 0, w_out = 0;
  uint32_t T = 0, E = 0, k = 0, sigmoid = 0;
  uint32_t renormalize = 0, n_groups = 1, topk_groups = 1, has_bias = 0;
  float weight_scale = 1.0f;
  uint32_t pad = 0;
};
static_assert(sizeof(TopkParams) == 104);

// recurrent.comp STAGE 0 (ssm_conv)
struct ConvParams {
  TensorRef x, w, st;
  uint64_t query_start = 0, slots = 0, dst = 0;
  uint32_t S = 0, C = 0, K = 0, silu = 0;
  uint32_t out_dtype = 0, T = 0, n_slots = 0, pad = 0;
};
static_assert(sizeof(ConvParams) == 176);

// recurrent.comp STAGE 1 (gated_delta_net)
struct GdnParams {
  TensorRef q, k, v, alpha, beta, st;
  uint64_t decay_rate = 0, dt_bias = 0, query_start = 0, slots = 0, dst = 0;  // decay_rate 0: absent
  uint32_t S = 0, Hk = 0, Hv = 0, Dk = 0;
  uint32_t Dv = 0, l2_norm = 0, out_dtype = 0, T = 0;
  float scale = 1.0f, eps = 0.0f;
  uint32_t n_slots = 0, tiled_heads = 0;
};
static_assert(sizeof(GdnParams) == 328);

// lora.comp
struct LoraParams {
  TensorRef x, base, a, b;
  uint64_t ranks = 0, scales = 0, seg_start = 0, seg_slot = 0, dst = 0;
  uint32_t T = 0, K = 0, N = 0, R = 0;
  uint32_t G = 0, n_slots = 0, out_dtype = 0, pad = 0;
};
static_assert(sizeof(LoraParams) == 232);

}  // namespace tessera::vulkan

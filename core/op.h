// The closed op set. Every backend implements every op for every dtype it claims; the
// conformance suite (tests/conformance) makes a missing one a failure. Add an op only when a
// model needs it, with its reference (core/reference) and conformance test in the same commit.
#pragma once
#include <cstdint>
#include <variant>

#include "quant/dtype.h"

namespace tessera {

enum class OpKind : uint8_t {
  kEmbed,      // out[t, :] = weight[ids[t], :]            weight any dtype, ids i32
  kMatmul,     // out = x @ w^T (+ bias)                      x [M,K] act, w [N,K] any dtype
  kMatmulId,   // MoE grouped matmul: rows routed to experts  w [E,N,K]
  kRmsNorm,    // x / rms(x) (* w) over the last dim
  kRope,       // rotary embedding, normal or NeoX pairs, YaRN/linear/freq-factor scaling
  kAttention,  // varlen GQA attention (causal or not) over a paged KV cache; writes the new K/V
  kGlu,        // act(gate) * up: SwiGLU (silu), GeGLU (gelu, tanh form), sigmoid gate, gpt-oss's clamped SwiGLU
  kAdd,        // a + b, b broadcast over leading dims
  kMul,        // a * b, b broadcast over leading dims
  kScale,      // x * s, then softcap * tanh(. / softcap) when softcap > 0 (Gemma's logit softcap)
  kSoftmax,    // softmax(x * scale) over the last dim
  kTopkRoute,  // router scores -> (expert ids, weights)
  kCast,       // dtype conversion between f32/f16/bf16
  kCopy,       // strided view -> contiguous
  kView,       // pseudo-op: an alias of another value (reshape, slice); computes nothing
  kLayerNorm,  // (x - mean(x)) / sqrt(var(x) + eps) (* w) (+ b) over the last dim (BERT)
  kGelu,       // 0.5 x (1 + erf(x / sqrt 2)): the exact GELU of BERT's FFN (no gate)
  // Recurrent layers (hybrid models): each sequence's state lives in a RecurrentStatePool row
  // (core/kv/state_pool.h) that the op reads and updates in place, as attention writes the KV cache.
  kSsmConv,        // causal depthwise conv1d over each sequence's rows, its last K-1 inputs kept
  kGatedDeltaNet,  // gated delta rule: linear attention with a per-sequence [Hv, Dk, Dv] state
  // Multi-LoRA (docs/lora.md): out = base + per segment of rows sharing adapter slot a,
  // scale_a * (x A_a^T) B_a^T (shrink to the adapter's rank, then expand); base rows pass through.
  kLora,
  // Tensor parallelism (docs/multi-device.md): the elementwise sum of a float value over the ranks
  // of the model's Communicator (core/comm). A pseudo-op no backend runs: SplitGraph performs it
  // between the segments it splits the step graph into (core/exec/split_graph.h).
  kAllReduce,
  kCount,
};
inline constexpr int kNumOps = static_cast<int>(OpKind::kCount);
// The largest adapter rank the lora op takes (its GPU kernels keep a row's shrunk vector in
// shared memory).
inline constexpr int64_t kLoraMaxRank = 256;
const char* op_name(OpKind op);

// act(gate) * up; kSwigluOai is gpt-oss's: g = min(gate, limit), u = clamp(up, -limit, limit),
// out = g * sigmoid(alpha * g) * (u + 1).
enum class GluKind : uint8_t { kSilu, kGelu, kSigmoid, kSwigluOai };
enum class RopeMode : uint8_t {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1])        -- llama in GGUF
  kNeox,    // rotate (x[i], x[i + n_dims/2])                  -- qwen2/3, NeoX, HF layout
};
enum class RouteScoring : uint8_t { kSoftmax, kSigmoid };

struct NoParams {};
struct RmsNormParams { float eps = 1e-5f; };
struct LayerNormParams { float eps = 1e-12f; };
struct ScaleParams {
  float scale = 1.0f;
  float softcap = 0.0f;  // 0: none; else y = softcap * tanh(scale * x / softcap)
};
struct SoftmaxParams { float scale = 1.0f; };
struct GluParams {
  GluKind kind = GluKind::kSilu;
  float alpha = 1.702f;  // kSwigluOai only
  float limit = 7.0f;    // kSwigluOai only
};
struct CastParams { DType to = DType::kF32; };
struct RopeParams {
  int n_dims = 0;             // leading dims of each head that rotate (<= head_dim; rest pass through)
  RopeMode mode = RopeMode::kNormal;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;    // 1 / linear scaling factor (also YaRN's interpolation factor)
  // YaRN (ext_factor > 0 enables the ramp between interpolation and extrapolation).
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;   // multiplies cos/sin
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
  int n_ctx_orig = 0;         // training context, for YaRN's correction dims
};
struct AttentionParams {
  float scale = 0.0f;         // softmax scale; 0 means 1/sqrt(head_dim)
  int sliding_window = 0;     // 0: none; else a query at p sees keys (p - window, p]
  float softcap = 0.0f;       // 0: none; else logits = softcap * tanh(logits / softcap)
  // false: every query of a sequence sees all seq_lens[s] keys (encoders: BERT). Needs
  // sliding_window 0.
  bool causal = true;
};
struct TopkRouteParams {
  int k = 2;
  RouteScoring scoring = RouteScoring::kSoftmax;
  bool renormalize = true;    // divide the k weights by their sum
  int n_groups = 1;           // grouped top-k (DeepSeek-style): experts split into groups,
  int topk_groups = 1;        //   keep the best |topk_groups| groups, then top-k within them
  float weight_scale = 1.0f;  // multiplies the final weights (routed_scaling_factor)
};
struct ViewParams { int64_t byte_offset = 0; };
struct SsmConvParams { bool silu = true; };  // silu(conv) (Mamba, Gated DeltaNet) or the conv alone
struct GatedDeltaNetParams {
  float q_scale = 0.0f;  // scales q after its L2 norm; 0: 1/sqrt(Dk)
  bool l2_norm = true;   // q and k are L2-normalised per head first: x / sqrt(sum x^2 + eps)
  float eps = 1e-6f;
  // Which key head value head h reads: h / (Hv / Hk) (grouped, as Hugging Face checkpoints order
  // the value heads) or h % Hk (tiled: llama.cpp's GGUF files reorder them so for ggml's broadcast).
  bool tiled_heads = false;
};

using OpParams = std::variant<NoParams, RmsNormParams, ScaleParams, SoftmaxParams, GluParams,
                              CastParams, RopeParams, AttentionParams, TopkRouteParams, ViewParams,
                              LayerNormParams, SsmConvParams, GatedDeltaNetParams>;

// Inputs of ops with several, by position (kNoValue where an optional one is absent).
namespace in {
enum Embed { kEmbedWeight = 0, kEmbedIds = 1 };
enum Matmul { kMatmulX = 0, kMatmulW = 1, kMatmulBias = 2 };
// x [T, K] (shared by all k slots) or [T, k, K]; w [E, N, K]; ids [T, k] i32;
// weights [T, k] f32 optional: when present out is [T, N] = sum_j weights[t,j] * (W[ids[t,j]] x),
// else out is [T, k, N]. bias [E, N] float optional (gpt-oss): row ids[t,j] is added to slot j's
// product before the weighting.
enum MatmulId { kMatmulIdX = 0, kMatmulIdW = 1, kMatmulIdIds = 2, kMatmulIdWeights = 3, kMatmulIdBias = 4 };
enum RmsNorm { kRmsNormX = 0, kRmsNormW = 1 };
// x [..., C]; w [C] and b [C] optional.
enum LayerNorm { kLayerNormX = 0, kLayerNormW = 1, kLayerNormB = 2 };
// x [T, H, D]; positions [T] i32; freq_factors [n_dims/2] f32 optional (llama3-style scaling).
enum Rope { kRopeX = 0, kRopePos = 1, kRopeFreqFactors = 2 };
// q [T, Hq, D]; k, v [T, Hkv, D] (the new tokens); k_cache, v_cache [n_blocks, block_size, Hkv, D];
// slot_mapping [T] i32 (cache slot block*block_size+offset of each new token, -1: do not store);
// query_start [S+1] i32 (token rows of sequence s: query_start[s] .. query_start[s+1]);
// seq_lens [S] i32 (context length of s including its new tokens);
// block_tables [S, max_blocks] i32; sinks [Hq] f32 optional: a learned logit per q head that joins
// each row's softmax denominator (gpt-oss): out = sum_j e^(s_j) v_j / (e^sink + sum_j e^(s_j)).
// Output [T, Hq, D].
enum Attention {
  kAttnQ = 0,
  kAttnK,
  kAttnV,
  kAttnKCache,
  kAttnVCache,
  kAttnSlotMapping,
  kAttnQueryStart,
  kAttnSeqLens,
  kAttnBlockTables,
  kAttnSinks
};
// logits [T, E]; bias [E] optional (added to the scores for selection only).
// Outputs: ids [T, k] i32, weights [T, k] f32.
enum TopkRoute { kRouteLogits = 0, kRouteBias = 1 };
// x [T, C] act; w [C, K] f32 (tap K-1 meets the newest row: out[t] = sum_j w[:, j] * x[t-K+1+j]);
// state [n_slots, K-1, C] f32: a sequence's last K-1 inputs before this step (zeros at its start),
// replaced by its last K-1 inputs after it; query_start [S+1] i32; state_slots [S] i32 (the state
// row of sequence s). Output [T, C] act.
enum SsmConv { kConvX = 0, kConvW, kConvState, kConvQueryStart, kConvSlots };
// q, k [T, Hk, Dk]; v [T, Hv, Dv] (value head h reads key head h / (Hv / Hk), or h % Hk with
// GatedDeltaNetParams::tiled_heads); alpha [T, Hv]: the
// decay's input; beta [T, Hv]: the write strength's logit; decay_rate A [Hv] f32 and dt_bias [Hv]
// f32 optional (with them the log-decay is g = A * softplus(alpha + dt_bias), else g = alpha);
// state [n_slots, Hv, Dk, Dv] f32, updated in place; query_start [S+1]; state_slots [S]. Per row,
// head by head: S = exp(g) S; S += k (sigmoid(beta) (v - S^T k))^T; out = S^T q. Output [T, Hv, Dv].
enum GatedDeltaNet {
  kGdnQ = 0, kGdnK, kGdnV, kGdnAlpha, kGdnBeta, kGdnDecayRate, kGdnDtBias, kGdnState, kGdnQueryStart, kGdnSlots
};
// x [T, K] act; base [T, N] in x's dtype (the base projection x W^T); a [slots, R, K] and
// b [slots, R, N] float (f32/f16/bf16, one dtype): every adapter slot's down projection and its
// up projection transposed (row j of B_a is column j of PEFT's lora_B, so the expand is r row
// updates of length N, contiguous on a CPU and coalesced across a GPU's threads), zero-padded to
// the largest rank R (<= kLoraMaxRank); ranks [slots] i32 (slot a uses rows [0, ranks[a]) of its
// A and of its B); scales [slots] f32 (alpha / r, or
// alpha / sqrt(r) for rsLoRA); seg_start [G+1] i32 (0 = seg_start[0] <= ... <= seg_start[G] = T:
// segment g is rows seg_start[g] .. seg_start[g+1], possibly empty); seg_slot [G] i32 (the slot of
// segment g, -1: the base model, no delta). Output [T, N] in x's dtype:
// out[t] = base[t] + scales[a] * B_a[:r]^T (A_a[:r] x[t]) for t in a segment of slot a, r = ranks[a].
enum Lora { kLoraX = 0, kLoraBase, kLoraA, kLoraB, kLoraRanks, kLoraScales, kLoraSegStart, kLoraSegSlot };
}  // namespace in

}  // namespace tessera

// GraphContext: what a family's build_graph works with. It carries the step's inputs (as graph
// values, made once and shared by every layer), the KV cache, and the StepOptions of the step
// (pooled hidden states, expert statistics), and builds the blocks the families share. Its
// linear() and moe_ffn() are the single places every family's projections go through: an
// adapter's delta (multi-LoRA) or a tensor-parallel split is added there once, for every family.
// What a step asked for comes back in its members (hidden, route_ids), not out-parameters.
#pragma once
#include <vector>

#include "core/graph.h"
#include "core/kv/kv_cache.h"
#include "models/arch/weights.h"
#include "models/model_config.h"

namespace tessera {

class LoraSet;

// What the step runner asks of a step's graph beyond its logits.
struct StepOptions {
  bool pooled = false;        // keep every token's final normed hidden state [T, D] as output
  bool expert_stats = false;  // keep each MoE layer's routed expert ids [T, k] i32 as outputs
  // Loaded LoRA adapters (models/lora/lora.h): linear() adds the delta of each weight they target
  // to the rows of the sequences whose StepTensors::lora_slots name an adapter. Null: none.
  const LoraSet* lora = nullptr;
  // Tensor parallelism: this rank's place in the group. A row-parallel projection's bias joins
  // the sum on rank 0 alone.
  int tp_rank = 0;
};

class GraphContext {
 public:
  GraphContext(Graph& g, const ModelConfig& c, const StepTensors& in, const KvCache& kv, const StepOptions& opts);

  Graph& g;
  const ModelConfig& c;
  const StepTensors& in;
  const KvCache& kv;
  const StepOptions opts;
  // The step inputs as graph values.
  ValueId tokens, positions, slot_mapping, query_start, seq_lens, block_tables;
  // The window layers' slots and tables when the cache keeps them in a pool of their own.
  ValueId window_slot_mapping = kNoValue, window_block_tables = kNoValue;
  // Recurrent layers: each sequence's state row (StepTensors::state_slots).
  ValueId state_slots = kNoValue;
  // LoRA: each sequence's adapter slot (StepTensors::lora_slots), when opts.lora is set.
  ValueId lora_slots = kNoValue;
  int64_t n_tokens = 0;

  // A builder's own check that failed (the graph's ops check theirs in Graph::status()).
  const Status& status() const { return status_; }
  void fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

  // Outputs the runner reads after compute: the final normed hidden states (opts.pooled; an
  // encoder's graph value itself) and each MoE layer's expert ids (opts.expert_stats).
  ValueId hidden = kNoValue;
  std::vector<ValueId> route_ids;

  // A weight as a graph input; kNoValue for an absent optional weight (no buffer).
  ValueId weight(const Tensor& t) { return g.input(t); }
  ValueId optional(const Tensor& t) { return t.buffer ? g.input(t) : kNoValue; }

  // x W^T (+ bias), times the weight's tensor scale when it has one (NVFP4; the loader divided
  // the bias by that scale, so the bias comes out right), plus the LoRA delta of the sequences'
  // adapters where one targets W (the lora op, segments = the step's sequences). A row-parallel
  // shard (W.partial_sum) is summed over the ranks (all_reduce), its bias added once.
  ValueId linear(ValueId x, const WeightTensor& W, ValueId bias = kNoValue);
  // The rows of |table| for the step's tokens in the activation dtype, times |scale| and the
  // table's tensor scale.
  ValueId embed_tokens(const WeightTensor& table, float scale = 1.0f);
  // Self-attention of layer |layer| from its normed input |h| [T, D] to the output projection
  // [T, D]: q/k/v projections (optional biases), optional QK-norm (c.qk_norm), RoPE by |rope|
  // (with |freq_factors| when not kNoValue; none when rope.n_dims is 0), paged attention with
  // |ap| (which writes the new K/V into layer |layer| of the cache, through the window pool's
  // slots and tables when the cache holds the layer there), output projection (with |out_bias|
  // when given). With a.sinks bound, each head's sink logit joins its softmax (gpt-oss).
  ValueId attention(const AttentionWeights& a, ValueId h, int layer, const RopeParams& rope, ValueId freq_factors,
                    const AttentionParams& ap, ValueId out_bias = kNoValue);
  // The paged attention of layer |layer| alone, over q [T, Hq, Dh], k, v [T, Hkv, Dh] already
  // projected, normed and rotated: [T, Hq, Dh] (through the window pool when the cache holds the
  // layer there). For families whose projections differ (qwen35's gated q).
  ValueId paged_attention(ValueId q, ValueId k, ValueId v, int layer, const AttentionParams& ap,
                          ValueId sinks = kNoValue);
  // Layer |layer|'s recurrent state tensor |name| in the KV cache's state pool, as a graph input
  // (kNoValue, and status() fails, when the cache has none).
  ValueId recurrent_state(int layer, const char* name);
  // down(act(gate(h)) * up(h)): SwiGLU or GeGLU (tanh GELU).
  enum class Glu { kSwiGlu, kGeGlu };
  ValueId glu_ffn(const GluFfnWeights& f, ValueId h, Glu act = Glu::kSwiGlu);
  // Routed experts: top-k of the router's softmax (c.n_experts_used, renormalised when
  // c.expert_weights_norm), experts gated by |act| (SwiGLU by default) summed by weight, plus the
  // shared expert when the model has one (c.n_ff_shexp > 0). The router and experts take their
  // biases where the weights have them (gpt-oss). Records the layer's expert ids when opts.expert_stats.
  ValueId moe_ffn(const MoeWeights& m, ValueId h, const GluParams& act = GluParams{});
  // A decoder's end: the final norm of every row as |hidden| (when opts.pooled), then the logits
  // [R, vocab] f32 of the sampled rows (in.logit_rows), gathered back to f32, normed and
  // projected by the output head (then softcapped when c.final_softcap > 0).
  ValueId decoder_output(const ArchWeights& w, ValueId x);

 private:
  Status status_;
};

}  // namespace tessera

// The weight bindings several families share (models/arch/<family>.cpp call them from their
// tensor_specs): the attention projections, a gated FFN, and routed plus shared experts, each
// under one layer's GGUF prefix ("blk.N.").
#pragma once
#include <string>
#include <vector>

#include "models/arch/weights.h"
#include "models/model_config.h"

namespace tessera {

// A decoder's ends: the token embedding (kept in rows for the embed op), the final norm and the
// output head (optional: a tied model has none).
std::vector<TensorSpec> decoder_io_specs(const ModelConfig& c, ArchWeights* w);
// attn_q/k/v/output weights, their biases (required when c.qkv_bias, optional otherwise; none
// when |biases| is false) and the QK-norm weights (per head or over the whole projection, c.qk_norm).
void add_attention_specs(std::vector<TensorSpec>* s, const std::string& p, const ModelConfig& c, AttentionWeights* a,
                         bool biases = true);
// ffn_gate, ffn_up [F, D] and ffn_down [D, F].
void add_glu_specs(std::vector<TensorSpec>* s, const std::string& p, int64_t D, int64_t F, GluFfnWeights* f);
// The router and routed experts (merged [E, ...] tensors or per-expert ones), and the shared
// expert when c.n_ff_shexp > 0.
void add_moe_specs(std::vector<TensorSpec>* s, const std::string& p, const ModelConfig& c, MoeWeights* m);

}  // namespace tessera

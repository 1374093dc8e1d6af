#include "models/arch/blocks.h"

#include <unordered_set>

namespace tessera {

void ArchWeights::bind(const std::vector<TensorSpec>& specs) {
  std::unordered_set<const WeightTensor*> seen(bound_.begin(), bound_.end());
  for (const TensorSpec& s : specs)
    if (s.slot && seen.insert(s.slot).second) bound_.push_back(s.slot);
}

std::string per_expert_name(const std::string& merged, int e) {
  const std::string suffix = "_exps.weight";
  if (merged.size() < suffix.size() || merged.compare(merged.size() - suffix.size(), suffix.size(), suffix) != 0)
    return merged + "." + std::to_string(e);
  return merged.substr(0, merged.size() - suffix.size()) + "." + std::to_string(e) + ".weight";
}

void add_attention_specs(std::vector<TensorSpec>* s, const std::string& p, const ModelConfig& c, AttentionWeights* a,
                         bool biases) {
  const int64_t D = c.n_embd, Q = int64_t(c.n_heads) * c.head_dim, KV = int64_t(c.n_kv_heads) * c.head_dim;
  const bool per_head = c.qk_norm == QkNorm::kPerHead, full = c.qk_norm == QkNorm::kFull;
  const size_t first = s->size();
  s->insert(s->end(), {
      {p + "attn_q.weight", {Q, D}, true, &a->wq},
      {p + "attn_k.weight", {KV, D}, true, &a->wk},
      {p + "attn_v.weight", {KV, D}, true, &a->wv},
      {p + "attn_output.weight", {D, Q}, true, &a->wo},
  });
  if (biases)
    s->insert(s->end(), {
        {p + "attn_q.bias", {Q}, c.qkv_bias, &a->bq},
        {p + "attn_k.bias", {KV}, c.qkv_bias, &a->bk},
        {p + "attn_v.bias", {KV}, c.qkv_bias, &a->bv},
    });
  s->insert(s->end(), {
      {p + "attn_q_norm.weight", {full ? Q : c.head_dim}, per_head || full, &a->q_norm},
      {p + "attn_k_norm.weight", {full ? KV : c.head_dim}, per_head || full, &a->k_norm},
  });
  // Tensor parallelism: heads split across ranks (q/k/v rows and biases), the output projection
  // by its input columns; per-head norms stay whole (a norm over all heads cannot split:
  // Architecture::tensor_parallel_unsupported says so).
  for (size_t i = first; i < s->size(); ++i) {
    TensorSpec& t = (*s)[i];
    if (t.slot == &a->wo) t.tp_dim = 1;
    else if (t.slot != &a->q_norm && t.slot != &a->k_norm) t.tp_dim = 0;
  }
}

std::vector<TensorSpec> decoder_io_specs(const ModelConfig& c, ArchWeights* w) {
  const int64_t D = c.n_embd, V = c.n_vocab;
  return {
      {"token_embd.weight", {V, D}, true, &w->tok_embd, false, false, false, 0, 0, true},
      {"output_norm.weight", {D}, true, &w->output_norm},
      {"output.weight", {V, D}, false, &w->output},
  };
}

void add_glu_specs(std::vector<TensorSpec>* s, const std::string& p, int64_t D, int64_t F, GluFfnWeights* f) {
  s->insert(s->end(), {
      {p + "ffn_gate.weight", {F, D}, true, &f->gate},
      {p + "ffn_up.weight", {F, D}, true, &f->up},
      {p + "ffn_down.weight", {D, F}, true, &f->down},
  });
  // Tensor parallelism: gate/up rows and down's matching columns split across ranks.
  for (size_t i = s->size() - 3; i < s->size(); ++i) (*s)[i].tp_dim = (*s)[i].slot == &f->down ? 1 : 0;
}

void add_moe_specs(std::vector<TensorSpec>* s, const std::string& p, const ModelConfig& c, MoeWeights* m) {
  const int64_t D = c.n_embd, E = c.n_experts, Fe = c.n_ff_exp, Fs = c.n_ff_shexp;
  const size_t first = s->size();
  s->insert(s->end(), {
      {p + "ffn_gate_inp.weight", {E, D}, true, &m->router},
      {p + "ffn_gate_exps.weight", {E, Fe, D}, true, &m->gate_exps, true},
      {p + "ffn_up_exps.weight", {E, Fe, D}, true, &m->up_exps, true},
      {p + "ffn_down_exps.weight", {E, D, Fe}, true, &m->down_exps, true},
  });
  if (Fs > 0)
    s->insert(s->end(), {
        {p + "ffn_gate_inp_shexp.weight", {1, D}, true, &m->shexp_gate, false, true},
        {p + "ffn_gate_shexp.weight", {Fs, D}, true, &m->gate_shexp},
        {p + "ffn_up_shexp.weight", {Fs, D}, true, &m->up_shexp},
        {p + "ffn_down_shexp.weight", {D, Fs}, true, &m->down_shexp, false, false, true},
  });
  // Tensor parallelism: every expert's FFN rows (and the shared expert's) split across ranks, as
  // a dense FFN's are; the routers stay whole.
  for (size_t i = first; i < s->size(); ++i) {
    TensorSpec& t = (*s)[i];
    if (t.slot == &m->gate_exps || t.slot == &m->up_exps || t.slot == &m->down_shexp) t.tp_dim = 1;
    else if (t.slot == &m->down_exps) t.tp_dim = 2;
    else if (t.slot == &m->gate_shexp || t.slot == &m->up_shexp) t.tp_dim = 0;
  }
}

}  // namespace tessera

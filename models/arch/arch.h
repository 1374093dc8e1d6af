// The one place that maps a GGUF architecture name to its family file (models/arch/<family>.h):
// Model and the tools reach every family through these three functions.
#pragma once
#include <vector>

#include "models/arch/llama.h"

namespace tessera {

namespace gguf { class File; }

// The config of |f|'s general.architecture; Unimplemented naming it (and the supported ones)
// when no family builds it.
Result<ModelConfig> arch_config_from_gguf(const gguf::File& f);
// The tensors |cfg|'s family needs, bound to |w|'s fields.
std::vector<TensorSpec> arch_tensor_specs(const ModelConfig& cfg, LlamaWeights* w);
// The step graph of |cfg|'s family (see build_llama_graph; |route_ids| is for MoE models).
// |hidden|, when given, receives the final (normed) hidden states of every token [T, D] f32,
// marked as output, for pooling into embeddings; an encoder's graph returns them as its value.
ValueId arch_build_graph(Graph& g, const ModelConfig& cfg, const LlamaWeights& w, const StepTensors& in, const KvCache& kv,
                         std::vector<ValueId>* route_ids = nullptr, ValueId* hidden = nullptr);

}  // namespace tessera

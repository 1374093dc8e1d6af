#include "models/arch/arch.h"

#include "models/arch/bert.h"
#include "models/arch/gemma3.h"
#include "models/arch/phi3.h"
#include "models/gguf/gguf.h"

namespace tessera {

Result<ModelConfig> arch_config_from_gguf(const gguf::File& f) {
  TS_ASSIGN_OR_RETURN(const std::string arch, f.get_string("general.architecture"));
  if (arch == "gemma3") return gemma3_config_from_gguf(f);
  if (arch == "bert") return bert_config_from_gguf(f);
  if (arch == "phi3") return phi3_config_from_gguf(f);
  return llama_config_from_gguf(f);  // its error lists every supported architecture
}

std::vector<TensorSpec> arch_tensor_specs(const ModelConfig& cfg, LlamaWeights* w) {
  if (cfg.arch == "gemma3") return gemma3_tensor_specs(cfg, w);
  if (cfg.arch == "bert") return bert_tensor_specs(cfg, w);
  if (cfg.arch == "phi3") return phi3_tensor_specs(cfg, w);
  return llama_tensor_specs(cfg, w);
}

ValueId arch_build_graph(Graph& g, const ModelConfig& cfg, const LlamaWeights& w, const StepTensors& in, const KvCache& kv,
                         std::vector<ValueId>* route_ids, ValueId* hidden) {
  if (cfg.arch == "gemma3") return build_gemma3_graph(g, cfg, w, in, kv, hidden);
  if (cfg.arch == "phi3") return build_phi3_graph(g, cfg, w, in, kv, hidden);
  if (cfg.arch == "bert") {
    const ValueId x = build_bert_graph(g, cfg, w, in, kv);
    if (hidden) *hidden = x;
    return x;
  }
  return build_llama_graph(g, cfg, w, in, kv, route_ids, hidden);
}

}  // namespace tessera

// Architecture: one model family as a type. Each family lives in one file under models/arch/
// (llama.cpp, gemma3.cpp, phi3.cpp, bert.cpp) and is registered by one line in
// models/arch/registry.cpp; Model, the safetensors loader, `tessera convert` and the tools reach
// a family only through this interface, so no code outside the family branches on its name.
//
// A family gives: its config (from GGUF metadata and from an HF config.json), its weights (a
// struct of its own, bound to GGUF names by tensor_specs; the HF names come from
// hf_tensor_prefix), its step graph (built through a GraphContext, models/arch/graph_context.h),
// what a converted GGUF stores for it, its cost prior's shape and which memory each layer keeps
// between steps (docs/adding-an-architecture.md walks through one family file).
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/graph.h"
#include "core/kv/state_pool.h"
#include "models/arch/weights.h"
#include "models/model_config.h"

namespace tessera {

namespace gguf { class File; class MetadataBuilder; }
namespace safetensors {
class JsonObject;
class Checkpoint;
struct LongRopeFactors;
struct HfTensor;
}  // namespace safetensors
class GraphContext;

// The memory a layer keeps between steps (hybrid models mix them; core/kv holds each kind).
enum class LayerMemoryKind : uint8_t {
  kFullAttention,  // K/V of every token of the context (paged KV)
  kSlidingWindow,  // K/V of the last |window| tokens only
  kRecurrent,      // a fixed-size state per sequence (convolution tail, recurrent matrix state)
  kNone,           // nothing (an encoder's attention over one step's tokens)
};
const char* layer_memory_name(LayerMemoryKind k);  // "full", "window", "recurrent", "none"
struct LayerMemory {
  LayerMemoryKind kind = LayerMemoryKind::kFullAttention;
  int window = 0;  // kSlidingWindow: keys a query sees, its own included
};

// config.json as a family's config_from_hf reads it: the object, its folder (sentence-
// transformers modules beside it), its model_type, and where a phi3 checkpoint's two longrope
// lists go when asked for (nullptr: read only the chosen one).
struct HfConfigInput {
  const safetensors::JsonObject& json;
  const std::string& dir;
  const std::string& model_type;
  safetensors::LongRopeFactors* longrope = nullptr;
};

// The FLOPs of one step as the scheduler's cost prior counts them (Model::cost_prior adds the
// bytes of the loaded weights and the device's speeds).
struct CostShape {
  double flops_per_token = 0;  // through the layers (MoE: the routed experts only)
  double flops_per_logit = 0;  // the output head, per sampled row
  double flops_per_pair = 0;   // attention, per query-key pair over every layer
};

class Architecture {
 public:
  virtual ~Architecture() = default;

  // The GGUF general.architecture names this family builds (the first is its own name).
  virtual std::vector<std::string> gguf_names() const = 0;
  // HF config.json model_type values this family reads, each with the GGUF name it loads as.
  virtual std::vector<std::pair<std::string, std::string>> hf_model_types() const { return {}; }

  // The config from GGUF metadata ({arch}.* keys). Errors name the file and key.
  virtual Result<ModelConfig> config_from_gguf(const gguf::File& f) const = 0;
  // The family's part of reading config.json: |c| arrives with arch, name and the sizes every
  // family has (layers, hidden, FFN, heads, KV heads, head dim, context, vocabulary) read.
  virtual Status config_from_hf(const HfConfigInput& in, ModelConfig* c) const;

  // A new, empty weights struct of the family's own type.
  virtual std::unique_ptr<ArchWeights> new_weights() const = 0;
  // The tensors |c| implies, bound to |w|'s fields (|w| from new_weights(); sized here).
  virtual std::vector<TensorSpec> tensor_specs(const ModelConfig& c, ArchWeights* w) const = 0;
  // The HF module path of our (GGUF-named) tensor |name| without ".weight"/".bias", or "" when
  // the checkpoint has none. The default maps the llama layout (model.layers.N.self_attn.q_proj).
  virtual std::string hf_tensor_prefix(const ModelConfig& c, const std::string& name, const safetensors::Checkpoint& ckpt) const;
  // The HF module path of routed expert |e|'s projection |proj| ("ffn_gate", "ffn_up",
  // "ffn_down") in layer |layer| (checkpoints that store one module per expert).
  virtual std::string hf_expert_prefix(const ModelConfig& c, int layer, const std::string& proj, int e,
                                       const safetensors::Checkpoint& ckpt) const;
  // How our tensor |s| is read from |ckpt| when its name is not enough (safetensors::HfTensor:
  // values transformed, unit dims squeezed, experts fused in one tensor): true with |*out| set,
  // or false for the default path (hf_tensor_prefix, hf_expert_prefix).
  virtual bool hf_tensor(const ModelConfig& c, const TensorSpec& s, const safetensors::Checkpoint& ckpt,
                         safetensors::HfTensor* out) const;
  // Why `tessera convert` / `quantize` cannot write a GGUF of this family's checkpoint as it is
  // loaded ("" when they can): a family whose GGUF layout the loader's tensors do not match.
  virtual std::string gguf_unconvertible(const ModelConfig&) const { return ""; }
  // Whether a converted GGUF stores q/k rows in adjacent-pair rope order (llama, mistral: GGUF's
  // loader uses RopeMode::kNormal there), so `tessera convert` permutes HF's rotate-half rows.
  virtual bool gguf_rope_rows_permuted(const ModelConfig&) const { return false; }
  // The {arch}.* keys a converted GGUF stores for |c| (what config_from_gguf reads back).
  virtual void add_gguf_config(gguf::MetadataBuilder& w, const ModelConfig& c,
                               const safetensors::LongRopeFactors* longrope) const;

  // The step graph: the logits [R, vocab] f32 of the sampled rows (an encoder: the hidden states
  // [T, D] f32), marked as output.
  virtual ValueId build_graph(GraphContext& ctx, const ArchWeights& w) const = 0;

  // Which memory each layer keeps (the default: full attention, or the window where
  // ModelConfig::is_sliding says so; an encoder keeps none).
  virtual std::vector<LayerMemory> memory_layout(const ModelConfig& c) const;
  // The state tensors of each recurrent layer (LayerMemoryKind::kRecurrent), without the slot
  // dimension: what the KV cache's state pool keeps per sequence. The default: none.
  virtual std::vector<RecurrentLayerSpec> recurrent_states(const ModelConfig&) const { return {}; }
  // Why |c| cannot run tensor-parallel ("" when it can: its step graph goes through
  // GraphContext's linear(), attention() and FFN blocks, which split by the TensorSpecs' tp_dim).
  virtual std::string tensor_parallel_unsupported(const ModelConfig&) const {
    return "its step graph does not split its projections across ranks yet";
  }
  // The FLOPs the scheduler's cost prior starts from (the default: a decoder of q/k/v/o
  // projections, an FFN of gate/up/down and attention over every layer).
  virtual CostShape cost_shape(const ModelConfig& c) const;
};

// The decoder keys every GGUF family stores ({arch}.block_count ... rope scaling, experts).
void add_decoder_gguf_config(gguf::MetadataBuilder& w, const ModelConfig& c);

}  // namespace tessera

// LoRA adapters on a loaded model (docs/lora.md): PEFT adapter folders and llama.cpp's GGUF
// adapter files read against the model's own weights, and every loaded adapter's tensors stacked
// into device slots for the lora op (core/op.h in::Lora). GraphContext::linear adds the delta of
// the weights an adapter targets.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/device.h"
#include "models/arch/weights.h"
#include "models/model_config.h"

namespace tessera {

class Architecture;

// A base weight an adapter may target: its GGUF name and field (2-D projections only).
struct LoraTarget {
  std::string name;  // "blk.3.attn_q.weight"
  const WeightTensor* weight = nullptr;
  int64_t rows = 0, cols = 0;  // N, K
};

// One targeted module of an adapter, f32 in host memory, in the base weight's row order (q/k
// rows permuted where the model's file stores them in GGUF's rope order).
struct LoraPair {
  int64_t rows = 0, cols = 0;  // N, K: the base weight's logical shape
  std::vector<float> a;        // [r, K]: lora_A, the down projection
  std::vector<float> b;        // [N, r]: lora_B, the up projection
};

// What a server allows (vLLM's --max-loras, --max-lora-rank, --max-cpu-loras); 0: no limit.
// max_loras: device slots, the adapters one step may use (a request whose adapter has no slot
// waits in the scheduler); max_cpu_loras: adapters loaded (held in host memory, each copied into
// a free or least recently used device slot when a step needs it); 0 there: max_loras, as vLLM.
struct LoraLimits {
  int max_loras = 0;
  int max_rank = 0;
  int max_cpu_loras = 0;
  int loaded_cap() const { return max_cpu_loras > 0 ? max_cpu_loras : max_loras; }
};

// A LoRA adapter (a PEFT folder or a llama.cpp GGUF file) read against one model.
struct LoraAdapter {
  std::string name, path;  // name "": an unloaded slot's hole (no modules)
  // Never reused while the model lives (Model::add_lora counts from 1), so the prefix cache
  // cannot take an unloaded adapter's K/V for the one loaded into its slot next (LoraRef::id).
  int32_t id = 0;
  int rank = 0;
  double alpha = 0.0;  // a GGUF adapter's adapter.lora.alpha (0 when absent)
  bool rslora = false;
  float scale = 1.0f;  // alpha / r, or alpha / sqrt(r) with use_rslora; a GGUF adapter's is 1 when alpha is 0
  // The precision its tensors came in: kF16 or kBF16 when every one of them was, else kF32. The
  // slot tensors keep it (LoraSet), halving the bytes a step reads when adapters are 16-bit.
  DType dtype = DType::kF32;
  // As adapter_config.json lists them; a GGUF adapter's tensor stems ("attn_q", "ffn_down").
  std::vector<std::string> target_modules;
  std::unordered_map<const WeightTensor*, LoraPair> modules;  // by the base weight it adds to
};

// An adapter's lora_B [rows, r] with its q/k rows moved between Hugging Face's rotate-half order
// and GGUF's adjacent-pair order (safetensors::gguf_rope_source_row): to_gguf for a PEFT adapter
// on a GGUF model, the reverse for a GGUF adapter on a model loaded from an HF folder.
std::vector<float> reorder_rope_rows(const std::vector<float>& b, int64_t rows, int64_t r, int64_t head_dim,
                                     bool to_gguf);

// kF16 or kBF16 when every dtype in |seen| is that one, else kF32 (LoraAdapter::dtype).
inline DType common_lora_dtype(const std::vector<DType>& seen) {
  if (seen.empty()) return DType::kF32;
  for (DType d : seen)
    if (d != seen[0] || (d != DType::kF16 && d != DType::kBF16)) return DType::kF32;
  return seen[0];
}

// Reads a PEFT adapter folder (adapter_config.json and adapter_model.safetensors) for the model
// whose weights are |targets|. Errors name the adapter and say what does not fit: a config that is
// not plain LoRA (DoRA, fan_in_fan_out, modules_to_save, per-module rank or alpha patterns), a
// module this model does not have (an adapter of another architecture), a lora_A without its
// lora_B or the reverse, a tensor whose shape does not match the base weight or the rank.
Result<LoraAdapter> read_peft_adapter(const std::string& name, const std::string& dir, const Architecture& arch,
                                      const ModelConfig& cfg, const std::vector<LoraTarget>& targets);

// Reads a llama.cpp GGUF LoRA adapter file (convert_lora_to_gguf.py's: general.type "adapter",
// adapter.type "lora", adapter.lora.alpha, tensors "<base tensor>.lora_a" [r, K] and ".lora_b"
// [N, r] in f32, f16, bf16 or q8_0) for the model whose weights are |targets|; scale alpha / r,
// or 1 when alpha is 0, as llama.cpp's. Errors name the adapter and the problem: not an adapter,
// another architecture, another adapter type (aLoRA, control vectors), a tensor this model does
// not have or LoRA is not supported on (token_embd, output: Unimplemented), a lora_a without its
// lora_b or the reverse, shapes that do not fit the base weight or each other, pairs of different
// ranks, another dtype, and the GGUF parser's for a truncated or corrupt file. q/k rows are taken
// in the GGUF base's order (the converter permuted them) and permuted back for a model loaded
// from a Hugging Face folder.
Result<LoraAdapter> read_gguf_adapter(const std::string& name, const std::string& path, const Architecture& arch,
                                      const ModelConfig& cfg, const std::vector<LoraTarget>& targets);

// The adapters' tensors on the device, in |slots| device slots (vLLM's --max-loras): for each
// base weight any adapter targets, A [slots, R, K] and B [slots, R, N] (lora_B transposed,
// zero-padded to the largest rank R of the adapters it was built for), the per-slot ranks
// [slots] i32 (0 where the slot's adapter does not target the weight) and scales [slots] f32.
// Adapters enter the slots when a step needs them (make_resident): a free slot, else the least
// recently used one that the step does not need; an adapter stays until evicted.
class LoraSet {
 public:
  // An adapter (index into the model's adapters; -1: none) at a multiple of its own scale: each
  // (index, scale) a step uses takes a slot of its own.
  struct Key {
    int32_t index = -1;
    float scale = 1.0f;
    bool operator==(const Key&) const = default;
  };
  struct Module {
    Tensor a, b, ranks, scales;
    int64_t rows = 0, cols = 0;  // N, K
  };
  // Allocates |slots| empty slots (ranks 0) for the modules of |adapters|.
  static Result<std::unique_ptr<LoraSet>> build(Device& device, const std::vector<LoraAdapter>& adapters, int slots);
  // Copies every adapter of |needed| (indexes into |adapters| with a scale; -1, the base model, is
  // skipped) that is not in a slot into one, evicting the least recently used adapters that |needed| does not
  // name; holes (id 0) are skipped and run as the base model. ResourceExhausted when |needed|
  // names more distinct adapters than there are slots (the engine's scheduler never plans such a
  // step).
  Status make_resident(Device& device, const std::vector<LoraAdapter>& adapters, std::span<const Key> needed);
  // The device slot holding |key|, or -1 when none does (an index of -1: the base model).
  int32_t slot_of(const Key& key) const;
  // The module of base weight |w|, or null when no adapter targets it.
  const Module* find(const WeightTensor* w) const {
    auto it = modules_.find(w);
    return it == modules_.end() ? nullptr : &it->second;
  }
  int slots() const { return slots_; }
  int max_rank() const { return max_rank_; }
  size_t bytes() const { return bytes_; }
  int64_t loads() const { return loads_; }  // adapters copied into a slot so far

 private:
  Status load(Device& device, const LoraAdapter& adapter, float scale, int slot);

  std::unordered_map<const WeightTensor*, Module> modules_;
  std::vector<const WeightTensor*> order_;  // modules_' keys in a fixed order
  std::vector<BufferPtr> buffers_;
  std::vector<Key> resident_;      // [slots]: the adapter at its scale, or index -1
  std::vector<int64_t> last_use_;  // [slots]: use_clock_ when a step last needed it
  int64_t use_clock_ = 0, loads_ = 0;
  DType dtype_ = DType::kF32;
  int slots_ = 0, max_rank_ = 0;
  size_t bytes_ = 0;
};

}  // namespace tessera

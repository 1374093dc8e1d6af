// PEFT LoRA adapter folders written by tests (docs/lora.md): adapter_config.json and an F32
// adapter_model.safetensors, as PEFT saves them, with random weights for a llama-shaped model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model_config.h"

namespace tessera::testing {

struct StTensor {
  std::string name;
  int64_t rows, cols;
  std::vector<float> data;
};

// Writes |dir|/adapter_config.json (rank |r|, |alpha|, rsLoRA, |targets| as target_modules) and
// |dir|/adapter_model.safetensors holding |tensors| (F32).
void write_peft_adapter(const std::string& dir, int r, double alpha, bool rslora,
                        const std::vector<std::string>& targets, const std::vector<StTensor>& tensors);

// Random lora_A [r, K] ~ U(-1, 1) / sqrt(K) and lora_B [N, r] ~ U(-1, 1) / sqrt(r) (PEFT starts B
// at zero; random here so that the delta shows) for |modules| ("self_attn.q_proj", "mlp.up_proj",
// ...) of every layer of a llama-shaped model |c|.
std::vector<StTensor> random_peft_adapter(const ModelConfig& c, int r, const std::vector<std::string>& modules,
                                          uint32_t seed);

// Every projection of a llama layer, as write_peft_adapter's targets and random_peft_adapter's modules.
inline const std::vector<std::string> kAllLlamaTargets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                          "gate_proj", "up_proj", "down_proj"};
inline const std::vector<std::string> kAllLlamaModules = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                          "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                          "mlp.down_proj"};

}  // namespace tessera::testing

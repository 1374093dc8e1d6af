// What the C API and tessera.hpp are checked against: the engine's greedy output for the same
// prompt, computed in-process through the C++ library (models/ and core/sched/) on the CPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::testing {

struct GreedyOutput {
  std::vector<int32_t> tokens;  // every generated token id (an end-of-generation token included)
  std::string text;
};

// Greedy generation of up to |max_tokens| from |text| encoded as the C API encodes a prompt
// (BOS and special tokens as the model wants), with a KV cache of |kv_tokens|; under the PEFT
// adapter in |lora_dir| when it is not empty.
Result<GreedyOutput> engine_greedy(const std::string& model_path, const std::string& text, int max_tokens,
                                   int kv_tokens, const std::string& lora_dir = "");

// Writes a random rank-8 PEFT adapter over every projection of the llama model |model_path| into
// |dir| (tests/support/peft_writer.h).
Status write_random_adapter(const std::string& model_path, const std::string& dir, uint32_t seed);

// The tiny llama model (f32, make_tiny_model --seed 5) in a fresh temp folder, written once per
// process; "" with |*error| set when make_tiny_model failed.
std::string tiny_model_path(std::string* error);

// $TESSERA_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf (default models-cache/).
std::string smollm2_path();

}  // namespace tessera::testing

// Name helpers for mapping our (GGUF) tensor names to a checkpoint's (Architecture::hf_tensor_prefix).
#pragma once
#include <string>

namespace tessera::safetensors {

// One row of a family's name table: our (GGUF) name part -> the HF module path part.
struct HfNameRow {
  const char* ours;
  const char* hf;
};

// Splits "blk.3.attn_q.weight" into (3, "attn_q", "weight"); false for other names.
bool split_layer_name(const std::string& name, int* layer, std::string* stem, std::string* suffix);

}  // namespace tessera::safetensors

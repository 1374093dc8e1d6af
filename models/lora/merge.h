// Merging a LoRA adapter into its base model offline (`tessera convert BASE.gguf OUT.gguf
// --merge-lora ADAPTER`, docs/lora.md): every weight the adapter targets becomes
// W + scale * lora_B lora_A, re-encoded in W's own format (f16 where that format has no
// encoder); every other tensor and all metadata are copied as they are.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "core/device.h"
#include "core/status.h"

namespace tessera {

struct MergeLoraOptions {
  float scale = 1.0f;                              // times the adapter's own (alpha / r, or alpha / sqrt(r) for rsLoRA)
  int threads = 0;                                 // encoder threads (0: all)
  std::function<void(int64_t, int64_t)> progress;  // (elements done, elements total)
};

struct MergeLoraStats {
  int merged_tensors = 0;
  int64_t bytes_out = 0;
};

// Reads |model_path| (a GGUF file) on |device| (a CPU device: the adapter is checked against the
// model as Model::add_lora checks it) and the adapter at |adapter_path| (a PEFT folder or a GGUF
// adapter), and writes the merged model to |out_path| (through a temporary file). Errors name the
// adapter's problem (as add_lora's), a base that is not a GGUF file, or the output.
Result<MergeLoraStats> merge_lora_to_gguf(const std::string& model_path, const std::string& adapter_path,
                                          const std::string& out_path, DevicePtr device, const MergeLoraOptions& o);

}  // namespace tessera

// ModelConfig: the hyperparameters of a transformer, read from GGUF metadata and checked
// against the tensors.
#pragma once
#include <string>

#include "core/op.h"

namespace tessera {

struct ModelConfig {
  std::string arch;          // "llama", "qwen2", "qwen3"
  std::string name;          // general.name
  int n_layers = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;           // n_dims, mode, base, scaling
  bool qk_norm = false;      // qwen3: RMSNorm over each head of q and k
  bool tied_output = false;  // no output.weight: the token embedding is the output head
};

}  // namespace tessera

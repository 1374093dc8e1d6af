// What one sequence keeps between steps at a context length, by kind of layer, from the config
// alone (no weights loaded): full-attention layers keep K/V for every token, sliding-window layers
// only their window's, KV-sharing layers (Gemma 4) read an earlier layer's and keep none,
// recurrent layers (Qwen3.5's Gated DeltaNet) a fixed-size state whatever the length.
// `tessera info MODEL` prints it; Model::create_kv_cache sizes the real pools the same way.
#pragma once
#include <cstdint>

#include "models/arch/architecture.h"

namespace tessera {

struct SequenceMemory {
  int64_t tokens = 0;
  int full_layers = 0, window_layers = 0, shared_layers = 0, recurrent_layers = 0;
  int window = 0;            // the widest window of the window layers (0: none)
  int64_t full_bytes = 0;    // K and V of the full-attention layers, in whole blocks
  int64_t window_bytes = 0;  // K and V of the window layers: at most the window's blocks, plus one
  int64_t state_bytes = 0;   // the recurrent layers' states (conv tails, matrix states)
  int64_t total() const { return full_bytes + window_bytes + state_bytes; }
};

// |kv_dtype|: the cache's dtype (8-bit caches count their per-row f32 scales); |block_size|: the
// paged cache's tokens per block.
SequenceMemory sequence_memory(const Architecture& arch, const ModelConfig& c, int64_t tokens, DType kv_dtype,
                               int block_size = 16);

}  // namespace tessera

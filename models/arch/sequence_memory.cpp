#include "models/arch/sequence_memory.h"

#include <algorithm>

#include "core/tensor.h"

namespace tessera {

SequenceMemory sequence_memory(const Architecture& arch, const ModelConfig& c, int64_t tokens, DType kv_dtype,
                               int block_size) {
  SequenceMemory m;
  m.tokens = tokens;
  const int64_t bs = std::max(block_size, 1);
  const int64_t blocks = (tokens + bs - 1) / bs;
  const std::vector<LayerMemory> layout = arch.memory_layout(c);
  for (int l = 0; l < c.n_layers && size_t(l) < layout.size(); ++l) {
    const LayerMemory& lm = layout[size_t(l)];
    if (lm.kind == LayerMemoryKind::kNone || lm.kind == LayerMemoryKind::kRecurrent) continue;
    if (c.kv_source(l) != l) {
      ++m.shared_layers;
      continue;
    }
    // K and V, one block each: the cache's own row layout (an 8-bit row carries its scale).
    const int64_t block_bytes = 2 * Tensor::make(kv_dtype, {1, bs, c.kv_heads_of(l), c.head_dim_of(l)}).nbytes();
    if (lm.kind == LayerMemoryKind::kSlidingWindow) {
      ++m.window_layers;
      m.window = std::max(m.window, lm.window);
      // The window's keys start anywhere in a block: one partial block at each end.
      m.window_bytes += std::min(blocks, (int64_t(lm.window) + bs - 1) / bs + 1) * block_bytes;
    } else {
      ++m.full_layers;
      m.full_bytes += blocks * block_bytes;
    }
  }
  for (const RecurrentLayerSpec& r : arch.recurrent_states(c)) {
    ++m.recurrent_layers;
    for (const StateTensorSpec& s : r.states)
      m.state_bytes += Tensor::make(s.dtype, int(s.shape.size()), s.shape.data()).nbytes();
  }
  return m;
}

}  // namespace tessera

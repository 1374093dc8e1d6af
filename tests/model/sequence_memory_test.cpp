// The memory one sequence keeps by kind of layer (models/arch/sequence_memory.h), against sums
// worked by hand: a hybrid model's attention K/V grows with the context and its recurrent state
// does not; window layers stop at their window; KV-sharing layers keep nothing of their own; an
// 8-bit cache counts its per-row scales.
#include <gtest/gtest.h>

#include "models/arch/registry.h"
#include "models/arch/sequence_memory.h"

namespace tessera {
namespace {

// Qwen3.5-like: 8 layers, full attention on every 4th (3 and 7), 2 KV heads of 256; Gated
// DeltaNet layers with a 4-tap convolution, 16 key and 16 value heads of 128.
ModelConfig hybrid() {
  ModelConfig c;
  c.arch = "qwen35";
  c.n_layers = 8;
  c.n_embd = 1024;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 256;
  c.n_ctx_train = 262144;
  c.layer_recurrent = {1, 1, 1, 0, 1, 1, 1, 0};
  c.ssm_conv_kernel = 4;
  c.ssm_k_heads = 16;
  c.ssm_v_heads = 16;
  c.ssm_head_dim = 128;
  return c;
}

TEST(SequenceMemory, HybridKvGrowsAndTheStateStaysFixed) {
  const Architecture* arch = ArchRegistry::find("qwen35");
  ASSERT_NE(arch, nullptr);
  const ModelConfig c = hybrid();
  // One recurrent layer: conv tail 3 x (2*16*128 + 16*128) f32, matrix state 16 x 128 x 128 f32.
  const int64_t state = 6 * (3 * 6144 * 4 + 16 * 128 * 128 * 4);
  for (const int64_t tokens : {int64_t(4096), int64_t(32768), int64_t(32769)}) {
    const SequenceMemory m = sequence_memory(*arch, c, tokens, DType::kF16);
    EXPECT_EQ(m.full_layers, 2);
    EXPECT_EQ(m.recurrent_layers, 6);
    EXPECT_EQ(m.window_layers, 0);
    const int64_t blocks = (tokens + 15) / 16;
    // K and V of 2 layers: blocks x 16 tokens x 2 heads x 256 x 2 bytes.
    EXPECT_EQ(m.full_bytes, 2 * 2 * blocks * 16 * 2 * 256 * 2) << tokens;
    EXPECT_EQ(m.state_bytes, state) << tokens;
    EXPECT_EQ(m.total(), m.full_bytes + state);
  }
  EXPECT_EQ(sequence_memory(*arch, c, 32768, DType::kF16).full_bytes, int64_t(128) << 20);  // 128 MiB at 32k
}

TEST(SequenceMemory, WindowLayersStopAtTheirWindowAndSharingLayersKeepNone) {
  const Architecture* arch = ArchRegistry::find("llama");
  ASSERT_NE(arch, nullptr);
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 6;
  c.n_heads = 4;
  c.n_kv_heads = 1;
  c.head_dim = 64;
  c.sliding_window = 512;
  c.layer_sliding = {1, 1, 0, 1, 1, 0};
  c.layer_kv_source = {0, 1, 2, 3, 0, 2};  // layer 4 reads layer 0's K/V, layer 5 layer 2's
  const int64_t block = 2 * 16 * 64 * 2;   // K and V of one block of one layer, f16
  SequenceMemory m = sequence_memory(*arch, c, 32768, DType::kF16);
  EXPECT_EQ(m.full_layers, 1);
  EXPECT_EQ(m.window_layers, 3);
  EXPECT_EQ(m.shared_layers, 2);
  EXPECT_EQ(m.window, 512);
  EXPECT_EQ(m.full_bytes, 2048 * block);
  EXPECT_EQ(m.window_bytes, 3 * (32 + 1) * block) << "the window's 32 blocks and a partial one";
  EXPECT_EQ(m.state_bytes, 0);
  m = sequence_memory(*arch, c, 100, DType::kF16);  // shorter than the window
  EXPECT_EQ(m.window_bytes, 3 * 7 * block);
  EXPECT_EQ(m.full_bytes, 7 * block);
  // int8_pc: one byte a value and an f32 scale per (token, head) row.
  m = sequence_memory(*arch, c, 32768, DType::kINT8_PC);
  EXPECT_EQ(m.full_bytes, 2 * 2048 * 16 * (64 + 4));
}

}  // namespace
}  // namespace tessera

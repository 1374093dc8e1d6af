// The tiny models written by make_tiny_model ($TESSERA_BIN) open with File and carry the keys,
// tensor names, shapes and dtypes the llama/qwen3 loaders expect.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "models/gguf/gguf.h"
#include "tests/support/test_support.h"
#include "tests/gguf/gguf_test_util.h"

namespace tessera::gguf {
namespace {

struct Expect {
  std::string arch;
  int64_t head_dim;
  bool qk_norm;
  bool tied;
};

TEST(GgufTinyModel, WrittenModelsOpen) {
  const char* bin = std::getenv("TESSERA_BIN");
  if (!bin) TESSERA_SKIP_MISSING() << "TESSERA_BIN not set";
  const std::string tool = std::string(bin) + "/make_tiny_model";
  if (!std::filesystem::exists(tool)) TESSERA_SKIP_MISSING() << tool << " not built";
  const std::string dir = testing::temp_path("tiny");
  std::filesystem::create_directories(dir);
  ASSERT_EQ(std::system((tool + " --all " + dir + " > /dev/null").c_str()), 0);
  for (const Expect& e : {Expect{"llama", 16, false, false}, Expect{"qwen3", 32, true, true}}) {
    for (const char* dt : {"f32", "f16", "q8_0", "q4_0", "q4_1"}) {
      SCOPED_TRACE(e.arch + " " + dt);
      auto fr = File::open(dir + "/tiny-" + e.arch + "-" + dt + ".gguf");
      ASSERT_TRUE(fr.ok()) << fr.status().to_string();
      const File& f = **fr;
      const std::string& a = e.arch;
      EXPECT_EQ(*f.get_string("general.architecture"), a);
      EXPECT_EQ(*f.get_int(a + ".block_count"), 2);
      EXPECT_EQ(*f.get_int(a + ".embedding_length"), 64);
      EXPECT_EQ(*f.get_int(a + ".feed_forward_length"), 128);
      EXPECT_EQ(*f.get_int(a + ".attention.head_count"), 4);
      EXPECT_EQ(*f.get_int(a + ".attention.head_count_kv"), 2);
      EXPECT_EQ(*f.get_int(a + ".attention.key_length"), e.head_dim);
      EXPECT_GT(*f.get_float(a + ".attention.layer_norm_rms_epsilon"), 0.0);
      EXPECT_EQ(*f.get_float(a + ".rope.freq_base"), 10000.0);
      EXPECT_EQ(*f.get_int(a + ".context_length"), 256);
      EXPECT_EQ(*f.get_string("tokenizer.ggml.model"), "gpt2");
      EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens")->size(), 260u);
      EXPECT_EQ(*f.get_int("tokenizer.ggml.bos_token_id"), 256);
      EXPECT_EQ(*f.get_int("tokenizer.ggml.eos_token_id"), 257);
      const DType want = *dtype_from_name(dt);
      const TensorInfo* emb = f.find_tensor("token_embd.weight");
      ASSERT_NE(emb, nullptr);
      EXPECT_EQ(emb->dtype, want);
      EXPECT_EQ(emb->shape[0], 260);
      EXPECT_EQ(emb->shape[1], 64);
      const TensorInfo* q = f.find_tensor("blk.1.attn_q.weight");
      ASSERT_NE(q, nullptr);
      EXPECT_EQ(q->shape[0], 4 * e.head_dim);
      EXPECT_EQ(f.find_tensor("blk.1.attn_norm.weight")->dtype, DType::kF32);
      EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->shape[1], 128);
      EXPECT_EQ(f.find_tensor("blk.0.attn_q_norm.weight") != nullptr, e.qk_norm);
      EXPECT_EQ(f.find_tensor("output.weight") == nullptr, e.tied);
      EXPECT_EQ(f.tensors().size(), 1 + 2 * (9 + (e.qk_norm ? 2 : 0)) + 1 + (e.tied ? 0 : 1));
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::gguf

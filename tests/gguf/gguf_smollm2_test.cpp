// Reads the real SmolLM2-135M-Instruct Q4_1 GGUF and checks it against what the PyPI `gguf`
// package (an independent reader) sees: tests/data/gguf/smollm2_tensors.txt, written by
// tests/gguf/make_smollm2_golden.py, lists every tensor's type, offset, size, ne[] and a hash of
// its bytes. Skips when the model is not in $TESSERA_MODELS.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/gguf/gguf.h"
#include "tests/support/test_support.h"

namespace tessera::gguf {
namespace {

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::shared_ptr<File> open_smollm2() {
  const std::string path =
      env_or_empty("TESSERA_MODELS") + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) return nullptr;
  auto f = File::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  return f.ok() ? *f : nullptr;
}

// Same word-wise FNV-1a as make_smollm2_golden.py.
uint64_t fnv1a64_words(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const uint64_t prime = 0x100000001b3ull;
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    uint64_t w;
    std::memcpy(&w, p + k, 8);
    h = (h ^ w) * prime;
  }
  for (; k < n; ++k) h = (h ^ p[k]) * prime;
  return h;
}

TEST(GgufSmolLM2, Metadata) {
  auto f = open_smollm2();
  if (!f) TESSERA_SKIP_MISSING() << "SmolLM2 GGUF not in $TESSERA_MODELS";
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 33u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("llama.block_count"), 30);
  EXPECT_EQ(*f->get_int("llama.embedding_length"), 576);
  EXPECT_EQ(*f->get_int("llama.feed_forward_length"), 1536);
  EXPECT_EQ(*f->get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(*f->get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(*f->get_int("llama.context_length"), 8192);
  EXPECT_EQ(*f->get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_FLOAT_EQ(float(*f->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(*f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*f->get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(*f->get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_FALSE(*f->get_bool("tokenizer.ggml.add_bos_token"));
  auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 49152u);
  EXPECT_EQ((*tokens)[1], "<|im_start|>");
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges")->size(), 48900u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type")->size(), 49152u);
  EXPECT_EQ(*f->get_string_array("general.languages"), std::vector<std::string>{"en"});
  EXPECT_NE(f->get_string("tokenizer.chat_template")->find("<|im_start|>"), std::string::npos);
}

TEST(GgufSmolLM2, TensorsMatchPythonGguf) {
  auto f = open_smollm2();
  if (!f) TESSERA_SKIP_MISSING() << "SmolLM2 GGUF not in $TESSERA_MODELS";
  std::ifstream golden(env_or_empty("TESSERA_TEST_DATA") + "/gguf/smollm2_tensors.txt");
  ASSERT_TRUE(golden) << "missing tests/data/gguf/smollm2_tensors.txt";
  ASSERT_EQ(f->tensors().size(), 272u);
  const auto* base = static_cast<const uint8_t*>(f->mapping().get());
  std::string line;
  size_t n = 0;
  while (std::getline(golden, line)) {
    std::istringstream in(line);
    std::string name, ne, hash;
    int type = 0;
    uint64_t offset = 0, nbytes = 0;
    in >> name >> type >> offset >> nbytes >> ne >> hash;
    SCOPED_TRACE(name);
    ASSERT_LT(n, f->tensors().size());
    const TensorInfo& t = f->tensors()[n++];  // file order
    EXPECT_EQ(t.name, name);
    EXPECT_EQ(dtype_traits(t.dtype).gguf_type, type);
    EXPECT_EQ(t.offset, offset);
    EXPECT_EQ(t.nbytes, nbytes);
    std::string ours;  // ne[] innermost first, as gguf prints it
    for (int d = t.rank - 1; d >= 0; --d) ours += std::to_string(t.shape[d]) + (d ? "," : "");
    EXPECT_EQ(ours, ne);
    const auto* p = static_cast<const uint8_t*>(f->tensor_data(t));
    ASSERT_GE(p, base);
    ASSERT_LE(p + t.nbytes, base + f->file_size());
    char ours_hash[17];
    std::snprintf(ours_hash, sizeof ours_hash, "%016llx",
                  static_cast<unsigned long long>(fnv1a64_words(p, t.nbytes)));
    EXPECT_EQ(ours_hash, hash);
  }
  EXPECT_EQ(n, 272u);
}

TEST(GgufSmolLM2, ShapesOutermostFirst) {
  auto f = open_smollm2();
  if (!f) TESSERA_SKIP_MISSING() << "SmolLM2 GGUF not in $TESSERA_MODELS";
  const TensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::kQ8_0);
  EXPECT_EQ(emb->rank, 2);
  EXPECT_EQ(emb->shape[0], 49152);
  EXPECT_EQ(emb->shape[1], 576);
  const TensorInfo* down = f->find_tensor("blk.29.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dtype, DType::kQ4_1);
  EXPECT_EQ(down->shape[0], 576);
  EXPECT_EQ(down->shape[1], 1536);
  const TensorInfo* k = f->find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape[0], 192);
  EXPECT_EQ(k->shape[1], 576);
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);  // tied embeddings
}

}  // namespace
}  // namespace tessera::gguf

// The architecture registry: every family is found by its GGUF and HF names, unknown names are
// errors that list the known ones, weights record what their family binds, and each family says
// which memory its layers keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "models/arch/registry.h"

namespace tessera {
namespace {

TEST(ArchRegistry, EveryFamilyIsFoundByEachOfItsNames) {
  const std::set<std::string> want = {"llama",  "mistral", "qwen2", "qwen3",  "qwen2moe",  "qwen3moe", "olmoe",
                                      "gemma3", "phi3",    "bert",  "qwen35", "qwen35moe", "gemma4",   "gpt-oss"};
  std::set<std::string> names;
  for (const Architecture* a : ArchRegistry::all())
    for (const std::string& n : a->gguf_names()) {
      EXPECT_TRUE(names.insert(n).second) << n << " is registered twice";
      EXPECT_EQ(ArchRegistry::find(n), a) << n;
    }
  EXPECT_EQ(names, want);
  for (const char* hf : {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "bert",
                         "phi3", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "gpt_oss"}) {
    const auto found = ArchRegistry::find_hf(hf);
    ASSERT_TRUE(found.has_value()) << hf;
    EXPECT_EQ(ArchRegistry::find(found->second), found->first) << hf << " loads as " << found->second;
  }
  EXPECT_EQ(ArchRegistry::find_hf("mixtral")->second, "llama");
  EXPECT_EQ(ArchRegistry::find_hf("qwen2_moe")->second, "qwen2moe");
  // Qwen3.5: the multimodal checkpoint's model_type and its text model's both load the text model.
  EXPECT_EQ(ArchRegistry::find_hf("qwen3_5")->second, "qwen35");
  EXPECT_EQ(ArchRegistry::find_hf("qwen3_5_moe_text")->second, "qwen35moe");
  EXPECT_EQ(ArchRegistry::find_hf("gpt_oss")->second, "gpt-oss");
}

TEST(ArchRegistry, AnUnknownNameListsTheKnownOnes) {
  EXPECT_EQ(ArchRegistry::find("rwkv9"), nullptr);
  EXPECT_FALSE(ArchRegistry::find_hf("gpt_neox").has_value());
  const auto got = ArchRegistry::get("rwkv9");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kUnimplemented);
  for (const char* known : {"'rwkv9'", "llama", "olmoe", "gemma3", "phi3", "bert"})
    EXPECT_NE(got.status().message().find(known), std::string::npos) << known << ": " << got.status().message();
}

ModelConfig small_config(const std::string& arch) {
  ModelConfig c;
  c.arch = arch;
  c.n_layers = 6;
  c.n_embd = 64;
  c.n_ff = 96;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.n_vocab = 100;
  c.n_ctx_train = 128;
  c.rope.n_dims = 16;
  return c;
}

TEST(ArchRegistry, WeightsRecordEveryFieldTheirFamilyBindsOnce) {
  for (const Architecture* a : ArchRegistry::all()) {
    ModelConfig c = small_config(a->gguf_names().front());
    if (c.arch == "bert") c.n_kv_heads = c.n_heads;
    SCOPED_TRACE(c.arch);
    auto w = a->new_weights();
    const std::vector<TensorSpec> specs = a->tensor_specs(c, w.get());
    w->bind(specs);
    w->bind(specs);  // binding again adds nothing
    std::set<const WeightTensor*> slots;
    for (const TensorSpec& s : specs) slots.insert(s.slot);
    EXPECT_EQ(w->tensors().size(), slots.size());
    EXPECT_EQ(std::set<const WeightTensor*>(w->tensors().begin(), w->tensors().end()), slots);
    // Every layer has tensors of its own.
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      EXPECT_TRUE(std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.name.rfind(p, 0) == 0; })) << p;
    }
  }
}

TEST(ArchRegistry, MemoryLayoutsNameEachLayersKind) {
  ModelConfig c = small_config("gemma3");
  c.sliding_window = 32;
  c.layer_sliding = {1, 1, 0, 1, 1, 0};
  const auto m = ArchRegistry::find("gemma3")->memory_layout(c);
  ASSERT_EQ(m.size(), 6u);
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(m[size_t(l)].kind, c.layer_sliding[size_t(l)] ? LayerMemoryKind::kSlidingWindow : LayerMemoryKind::kFullAttention);
    EXPECT_EQ(m[size_t(l)].window, c.layer_sliding[size_t(l)] ? 32 : 0);
  }
  const auto dense = ArchRegistry::find("llama")->memory_layout(small_config("llama"));
  for (const LayerMemory& lm : dense) EXPECT_EQ(lm.kind, LayerMemoryKind::kFullAttention);
  ModelConfig enc = small_config("bert");
  enc.causal = false;
  for (const LayerMemory& lm : ArchRegistry::find("bert")->memory_layout(enc)) EXPECT_EQ(lm.kind, LayerMemoryKind::kNone);
  EXPECT_STREQ(layer_memory_name(LayerMemoryKind::kSlidingWindow), "window");
}

TEST(ArchRegistry, CostShapeCountsOnlyTheRoutedExperts) {
  ModelConfig dense = small_config("qwen3");
  ModelConfig moe = small_config("qwen3moe");
  moe.n_experts = 8;
  moe.n_experts_used = 2;
  moe.n_ff_exp = dense.n_ff / 2;  // two routed experts of half the width: the dense FFN's FLOPs
  const CostShape a = ArchRegistry::find("qwen3")->cost_shape(dense), b = ArchRegistry::find("qwen3moe")->cost_shape(moe);
  EXPECT_DOUBLE_EQ(a.flops_per_token, b.flops_per_token);
  EXPECT_GT(a.flops_per_token, 0);
  EXPECT_DOUBLE_EQ(a.flops_per_logit, 2.0 * dense.n_embd * dense.n_vocab);
}

}  // namespace
}  // namespace tessera

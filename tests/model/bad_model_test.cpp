// A model file that is well-formed GGUF but wrong as a model gets a clear error naming the file,
// the key or tensor, and the values; so do prompts the engine cannot take. The inputs are
// edits of a valid tiny model written by make_tiny_model.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "core/reference/reference.h"
#include "core/registry.h"
#include "core/sched/engine.h"
#include "models/gguf/gguf.h"
#include "models/model.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class BadModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::process_temp_dir("tessera_bad_model");
    ASSERT_EQ(testing::run_make_tiny_model("--arch llama --dtype f32 --out " + dir_ + "/good.gguf"), "");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // Copies good.gguf to |name| through the Writer, letting |edit| change metadata and tensors.
  using Edit = std::function<void(std::vector<std::pair<std::string, gguf::Value>>&,
                                  std::vector<std::pair<gguf::TensorInfo, const void*>>&)>;
  std::string rewrite(const std::string& name, const Edit& edit) {
    auto src = gguf::File::open(dir_ + "/good.gguf");
    EXPECT_TRUE(src.ok());
    auto meta = (*src)->metadata();
    std::vector<std::pair<gguf::TensorInfo, const void*>> tensors;
    for (const auto& t : (*src)->tensors()) tensors.push_back({t, (*src)->tensor_data(t)});
    edit(meta, tensors);
    gguf::Writer w;
    for (auto& [k, v] : meta)
      if (k != "general.alignment") w.add(k, v);
    for (auto& [t, data] : tensors) {
      std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.rank);
      const Status s = w.add_tensor(t.name, t.dtype, shape, data, t.nbytes);
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(w.write(path).ok());
    return path;
  }
  Status load(const std::string& path) {
    return Model::load(path, std::make_shared<ref::ReferenceDevice>()).status();
  }
  static void set_int(std::vector<std::pair<std::string, gguf::Value>>& m, const std::string& key, int64_t v) {
    for (auto& [k, val] : m)
      if (k == key) val = gguf::Value::of_uint(gguf::ValueType::kU32, uint64_t(v));
  }
  static std::string dir_;
};
std::string BadModel::dir_;

TEST_F(BadModel, TheUneditedCopyLoads) {
  const Status s = load(rewrite("copy.gguf", [](auto&, auto&) {}));
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_F(BadModel, MissingRequiredKey) {
  const Status s = load(rewrite("nokey.gguf", [](auto& meta, auto&) {
    std::erase_if(meta, [](const auto& kv) { return kv.first == "llama.block_count"; });
  }));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("llama.block_count"), std::string::npos) << s.message();
}

TEST_F(BadModel, MoreLayersThanTensors) {
  const Status s = load(rewrite("layers.gguf", [](auto& meta, auto&) { set_int(meta, "llama.block_count", 3); }));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("blk.2."), std::string::npos) << s.message();
}

TEST_F(BadModel, ShapeContradictsHyperparameters) {
  const Status s = load(rewrite("shape.gguf", [](auto& meta, auto&) { set_int(meta, "llama.feed_forward_length", 96); }));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ffn_gate.weight' has shape [128, 64] but the hyperparameters imply [96, 64]"),
            std::string::npos)
      << s.message();
}

TEST_F(BadModel, HeadsNotAMultipleOfKvHeads) {
  const Status s = load(rewrite("heads.gguf", [](auto& meta, auto&) { set_int(meta, "llama.attention.head_count_kv", 3); }));
  EXPECT_NE(s.message().find("not a multiple of head_count_kv 3"), std::string::npos) << s.message();
}

TEST_F(BadModel, UnknownArchitecture) {
  const Status s = load(rewrite("arch.gguf", [](auto& meta, auto&) {
    for (auto& [k, v] : meta)
      if (k == "general.architecture") v = gguf::Value::of_string("rwkv9");
  }));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("'rwkv9'"), std::string::npos) << s.message();
  // The file, and every architecture the registry builds.
  EXPECT_NE(s.message().find("arch.gguf"), std::string::npos) << s.message();
  for (const char* known : {"llama", "qwen3moe", "gemma3", "phi3", "bert"})
    EXPECT_NE(s.message().find(known), std::string::npos) << known << ": " << s.message();
}

TEST_F(BadModel, MissingTensor) {
  const Status s = load(rewrite("notensor.gguf", [](auto&, auto& tensors) {
    std::erase_if(tensors, [](const auto& t) { return t.first.name == "blk.1.ffn_up.weight"; });
  }));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("'blk.1.ffn_up.weight' is missing"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("notensor.gguf"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("architecture llama"), std::string::npos) << s.message();
}

TEST_F(BadModel, TruncatedFileNamesTheFile) {
  const std::string path = dir_ + "/truncated.gguf";
  fs::copy_file(dir_ + "/good.gguf", path, fs::copy_options::overwrite_existing);
  fs::resize_file(path, fs::file_size(path) / 2);
  const Status s = load(path);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("truncated.gguf"), std::string::npos) << s.message();
}

// Found by model_load_fuzz: block_count was narrowed with int(), so 2^32 + 2 loaded as this
// 2-layer model; a huge one made the tensor specs allocate that many layers (bad_alloc); and the
// largest context_length overflowed int sizing the per-step buffer (undefined behaviour).
TEST_F(BadModel, OutOfRangeHyperparametersAreErrors) {
  Status s = load(rewrite("wrap.gguf", [](auto& meta, auto&) {
    for (auto& [k, v] : meta)
      if (k == "llama.block_count") v = gguf::Value::of_uint(gguf::ValueType::kU64, (uint64_t{1} << 32) + 2);
  }));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("key 'llama.block_count' value 4294967298 does not fit in 32 bits"), std::string::npos) << s.message();
  s = load(rewrite("many_layers.gguf", [](auto& meta, auto&) { set_int(meta, "llama.block_count", 1000000000); }));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block_count 1000000000 but the file holds only"), std::string::npos) << s.message();
}

// The tiny llama's metadata under the gemma3 architecture (its tensors do not fit gemma3, but
// these errors come from the config, before any tensor is looked at).
void as_gemma3(std::vector<std::pair<std::string, gguf::Value>>& meta) {
  for (auto& [k, v] : meta) {
    if (k == "general.architecture") v = gguf::Value::of_string("gemma3");
    if (k.rfind("llama.", 0) == 0) k = "gemma3." + k.substr(6);
  }
}

TEST_F(BadModel, Gemma3HugeBlockCountIsAnError) {
  const Status s = load(rewrite("gemma3_layers.gguf", [](auto& meta, auto&) {
    as_gemma3(meta);
    set_int(meta, "gemma3.block_count", 1000000000);
  }));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block_count 1000000000 but the file holds only"), std::string::npos) << s.message();
}

TEST_F(BadModel, Gemma3FinalLogitSoftcapIsRefusedByName) {
  const Status s = load(rewrite("gemma3_softcap.gguf", [](auto& meta, auto&) {
    as_gemma3(meta);
    meta.emplace_back("gemma3.final_logit_softcapping", gguf::Value::of_float(gguf::ValueType::kF32, 30.0));
  }));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("gemma3.final_logit_softcapping"), std::string::npos) << s.message();
}

// The tiny f32 llama as a phi3 file: keys renamed, and each layer's q/k/v and gate/up rows
// concatenated into the fused attn_qkv [Q + 2 KV, D] and ffn_up [2 F, D] that phi3 stores. The
// fused bytes live in |keep| (the Writer copies them when it writes).
void as_phi3(std::vector<std::pair<std::string, gguf::Value>>& meta, std::vector<std::pair<gguf::TensorInfo, const void*>>& tensors,
             std::vector<std::vector<uint8_t>>& keep) {
  for (auto& [k, v] : meta) {
    if (k == "general.architecture") v = gguf::Value::of_string("phi3");
    if (k.rfind("llama.", 0) == 0) k = "phi3." + k.substr(6);
  }
  auto find = [&](const std::string& name) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].first.name == name) return i;
    return tensors.size();
  };
  auto fuse = [&](const std::string& p, std::vector<std::string> parts, const std::string& fused) {
    gguf::TensorInfo info = tensors[find(p + parts[0])].first;
    info.name = p + fused;
    info.shape[0] = 0;
    info.nbytes = 0;
    keep.emplace_back();
    for (const std::string& part : parts) {
      const size_t i = find(p + part);
      const auto* d = static_cast<const uint8_t*>(tensors[i].second);
      keep.back().insert(keep.back().end(), d, d + tensors[i].first.nbytes);
      info.shape[0] += tensors[i].first.shape[0];
      info.nbytes += tensors[i].first.nbytes;
      tensors.erase(tensors.begin() + std::ptrdiff_t(i));
    }
    tensors.push_back({info, keep.back().data()});
  };
  for (int l = 0; find("blk." + std::to_string(l) + ".attn_q.weight") < tensors.size(); ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    fuse(p, {"attn_q.weight", "attn_k.weight", "attn_v.weight"}, "attn_qkv.weight");
    fuse(p, {"ffn_gate.weight", "ffn_up.weight"}, "ffn_up.weight");
  }
}

TEST_F(BadModel, Phi3FusedTensorsMissingOrMisshapenAreNamed) {
  std::vector<std::vector<uint8_t>> keep;
  Status s = load(rewrite("phi3.gguf", [&](auto& meta, auto& tensors) { as_phi3(meta, tensors, keep); }));
  ASSERT_TRUE(s.ok()) << "the well-formed phi3 copy: " << s.to_string();

  s = load(rewrite("phi3_noqkv.gguf", [&](auto& meta, auto& tensors) {
    as_phi3(meta, tensors, keep);
    std::erase_if(tensors, [](const auto& t) { return t.first.name == "blk.0.attn_qkv.weight"; });
  }));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("tensor 'blk.0.attn_qkv.weight' is missing"), std::string::npos) << s.message();

  // ffn_up with only the up half (the unfused llama's [F, D]): the fused shape is wrong.
  s = load(rewrite("phi3_ffn.gguf", [&](auto& meta, auto& tensors) {
    as_phi3(meta, tensors, keep);
    for (auto& [t, data] : tensors)
      if (t.name == "blk.0.ffn_up.weight") {
        t.shape[0] /= 2;
        t.nbytes /= 2;
      }
  }));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fused tensor 'blk.0.ffn_up.weight' has shape ["), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("but the hyperparameters imply ["), std::string::npos) << s.message();
}

void as_bert(std::vector<std::pair<std::string, gguf::Value>>& meta) {
  for (auto& [k, v] : meta) {
    if (k == "general.architecture") v = gguf::Value::of_string("bert");
    if (k.rfind("llama.", 0) == 0) k = "bert." + k.substr(6);
  }
}

TEST_F(BadModel, BertVariantsWeCannotRunAreRefusedByName) {
  Status s = load(rewrite("bert_causal.gguf", [](auto& meta, auto&) {
    as_bert(meta);
    meta.emplace_back("bert.attention.causal", gguf::Value::of_bool(true));
  }));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("bert.attention.causal = true"), std::string::npos) << s.message();
  s = load(rewrite("bert_rank.gguf", [](auto& meta, auto&) {
    as_bert(meta);
    meta.emplace_back("bert.pooling_type", gguf::Value::of_uint(gguf::ValueType::kU32, 4));
  }));
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("bert.pooling_type 4"), std::string::npos) << s.message();
  // A llama body under the bert name: the encoder's own tensors are what is missing.
  s = load(rewrite("bert_tensors.gguf", [](auto& meta, auto&) { as_bert(meta); }));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("position_embd.weight"), std::string::npos) << s.message();
}

TEST_F(BadModel, LargestContextLengthLoads) {
  const std::string path = rewrite("max_ctx.gguf", [](auto& meta, auto&) { set_int(meta, "llama.context_length", 2147483647); });
  LoadOptions opts;
  opts.max_seqs = 1;  // one block table of a full context: 512 MiB of address space, not touched
  auto m = Model::load(path, std::make_shared<ref::ReferenceDevice>(), opts);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->context_length(), 2147483647);
}

TEST_F(BadModel, EmptyAndOverlongPromptsAreRejected) {
  const std::string path = rewrite("ctx.gguf", [](auto& meta, auto&) { set_int(meta, "llama.context_length", 32); });
  auto m = Model::load(path, std::make_shared<ref::ReferenceDevice>());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto kv = (*m)->create_kv_cache(256);
  ASSERT_TRUE(kv.ok());
  Engine engine(**m, **kv, (*m)->codec());
  GenerationRequest r;
  auto empty = engine.submit(r);
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);
  r.prompt.assign(40, 65);
  auto longp = engine.submit(r);
  EXPECT_EQ(longp.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(longp.status().message().find("40 tokens, the context holds 32"), std::string::npos) << longp.status().message();
}

}  // namespace
}  // namespace tessera

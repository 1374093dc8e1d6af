// MoE models from tiny random GGUFs (make_tiny_model): the older per-expert tensor layout loads
// and gives the merged layout's logits exactly (in place when the experts lie evenly in the file,
// copied when they do not), bad per-expert files get errors naming the tensor, and the opt-in
// expert statistics count tokens x k routings per layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "core/registry.h"
#include "models/gguf/gguf.h"
#include "models/model.h"
#include "models/scoring.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class MoeModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::process_temp_dir("tessera_moe_model");
    for (const char* arch : {"mixtral", "qwen2moe"})
      for (const char* layout : {"merged", "split"}) {
        ASSERT_EQ(testing::run_make_tiny_model(std::string("--arch ") + arch + " --dtype q8_0 --expert-layout " + layout +
                                               " --out " + dir_ + "/" + arch + "-" + layout + ".gguf"),
                  "");
      }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  using Tensors = std::vector<std::pair<gguf::TensorInfo, const void*>>;
  // Copies |src| to |name| through the Writer, letting |edit| change the tensor list.
  std::string rewrite(const std::string& src, const std::string& name, const std::function<void(Tensors&)>& edit) {
    auto f = gguf::File::open(dir_ + "/" + src);
    EXPECT_TRUE(f.ok());
    Tensors tensors;
    for (const auto& t : (*f)->tensors()) tensors.push_back({t, (*f)->tensor_data(t)});
    edit(tensors);
    gguf::Writer w;
    for (const auto& [k, v] : (*f)->metadata())
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
  static std::vector<float> logits(const std::string& path, const DevicePtr& dev) {
    auto m = Model::load(path, dev);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return {};
    std::vector<float> out;
    const Status s = eval_logits(**m, prompt(), 16, &out, DType::kF32);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
  static std::vector<int32_t> prompt() {
    std::vector<int32_t> p = {256};
    for (int i = 0; i < 39; ++i) p.push_back((i * 37 + 11) % 256);
    return p;
  }
  static Status load_status(const std::string& path) { return Model::load(path, Registry::global().devices()[0]).status(); }
  static std::string dir_;
};
std::string MoeModel::dir_;

TEST_F(MoeModel, PerExpertLayoutGivesTheMergedLogitsOnEveryDevice) {
  // Reversing the per-expert tensors' order in the file defeats the in-place view: the loader
  // must copy them into one [E, ...] buffer instead.
  const std::string shuffled = rewrite("mixtral-split.gguf", "mixtral-reversed.gguf", [](Tensors& t) {
    std::vector<size_t> at;  // positions of the per-expert tensors, reversed among themselves
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i].first.name.find(".ffn_") != std::string::npos && std::isdigit(uint8_t(t[i].first.name[t[i].first.name.size() - 8])))
        at.push_back(i);
    ASSERT_EQ(at.size(), size_t(2 * 3 * 8));
    for (size_t i = 0; i < at.size() / 2; ++i) std::swap(t[at[i]], t[at[at.size() - 1 - i]]);
  });
  for (const DevicePtr& dev : Registry::global().devices()) {
    SCOPED_TRACE(dev->info().id);
    for (const char* arch : {"mixtral", "qwen2moe"}) {
      SCOPED_TRACE(arch);
      const auto merged = logits(dir_ + "/" + arch + "-merged.gguf", dev);
      const auto split = logits(dir_ + "/" + arch + "-split.gguf", dev);
      ASSERT_FALSE(merged.empty());
      EXPECT_EQ(merged, split);
    }
    EXPECT_EQ(logits(dir_ + "/mixtral-merged.gguf", dev), logits(shuffled, dev));
  }
}

TEST_F(MoeModel, SharedExpertGateLoadsAsARowOrA1DTensor) {
  // make_tiny_model writes ffn_gate_inp_shexp 1-D [dim], as llama.cpp declares it; files
  // converted from [1, dim] checkpoints may keep it 2-D. Both must load and agree.
  const std::string two_d = rewrite("qwen2moe-merged.gguf", "qwen2moe-2d.gguf", [](Tensors& t) {
    for (auto& [info, data] : t)
      if (info.name.find("ffn_gate_inp_shexp") != std::string::npos) {
        info.rank = 2;
        info.shape = {1, info.shape[0], 0, 0};
      }
  });
  const DevicePtr dev = Registry::global().devices()[0];
  EXPECT_EQ(logits(dir_ + "/qwen2moe-merged.gguf", dev), logits(two_d, dev));
}

TEST_F(MoeModel, MissingExpertIsNamed) {
  const Status s = load_status(rewrite("mixtral-split.gguf", "missing.gguf", [](Tensors& t) {
    std::erase_if(t, [](const auto& x) { return x.first.name == "blk.1.ffn_up.5.weight"; });
  }));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
  EXPECT_NE(s.message().find("'blk.1.ffn_up.5.weight' is missing"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("expert_count 8"), std::string::npos) << s.message();
}

TEST_F(MoeModel, NeitherLayoutPresentIsNamed) {
  const Status s = load_status(rewrite("mixtral-split.gguf", "none.gguf", [](Tensors& t) {
    std::erase_if(t, [](const auto& x) { return x.first.name.starts_with("blk.0.ffn_down."); });
  }));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
  EXPECT_NE(s.message().find("'blk.0.ffn_down_exps.weight' is missing"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("blk.0.ffn_down.0.weight"), std::string::npos) << s.message();
}

TEST_F(MoeModel, MismatchedExpertShapeIsNamed) {
  const Status s = load_status(rewrite("mixtral-split.gguf", "shape.gguf", [](Tensors& t) {
    for (auto& [info, data] : t)
      if (info.name == "blk.0.ffn_gate.3.weight") {
        info.shape[0] /= 2;  // half the rows: the data is still long enough
        info.nbytes /= 2;
      }
  }));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'blk.0.ffn_gate.3.weight' has shape [32, 64]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("[64, 64] for each expert"), std::string::npos) << s.message();
}

TEST_F(MoeModel, MismatchedExpertDtypeIsNamed) {
  const std::string f32 = dir_ + "/mixtral-split-f32.gguf";
  ASSERT_EQ(testing::run_make_tiny_model("--arch mixtral --dtype f32 --expert-layout split --out " + f32), "");
  auto other = gguf::File::open(f32);
  ASSERT_TRUE(other.ok());
  const gguf::TensorInfo* replacement = (*other)->find_tensor("blk.1.ffn_down.6.weight");
  ASSERT_NE(replacement, nullptr);
  const Status s = load_status(rewrite("mixtral-split.gguf", "dtype.gguf", [&](Tensors& t) {
    for (auto& [info, data] : t)
      if (info.name == "blk.1.ffn_down.6.weight") {
        info = *replacement;
        data = (*other)->tensor_data(*replacement);
      }
  }));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'blk.1.ffn_down.6.weight' is f32 but expert 0"), std::string::npos) << s.message();
}

TEST_F(MoeModel, ExpertBeyondTheCountIsAnError) {
  const Status s = load_status(rewrite("mixtral-split.gguf", "extra.gguf", [](Tensors& t) {
    for (size_t i = 0; i < t.size(); ++i)
      if (t[i].first.name == "blk.0.ffn_up.7.weight") {
        auto extra = t[i];
        extra.first.name = "blk.0.ffn_up.8.weight";
        t.push_back(extra);
        break;
      }
  }));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'blk.0.ffn_up.8.weight' is beyond expert_count 8"), std::string::npos) << s.message();
}

// Each layer routes every token of every step to k experts: prefill chunks and decode alike.
TEST_F(MoeModel, ExpertStatsCountTokensTimesKPerLayer) {
  for (const DevicePtr& dev : Registry::global().devices()) {
    SCOPED_TRACE(dev->info().id);
    for (const char* arch : {"mixtral", "qwen2moe"}) {
      SCOPED_TRACE(arch);
      auto m = Model::load(dir_ + "/" + arch + "-merged.gguf", dev);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      Model& model = **m;
      std::vector<float> out;
      ASSERT_TRUE(eval_logits(model, prompt(), 16, &out, DType::kF32).ok());
      EXPECT_EQ(model.expert_stats().tokens, 0) << "collection is opt-in";
      model.set_collect_expert_stats(true);
      ASSERT_TRUE(eval_logits(model, prompt(), 16, &out, DType::kF32).ok());  // chunks of 16, 16, 8
      ASSERT_TRUE(eval_logits(model, {256, 65}, 1, &out, DType::kF32).ok());  // two single-token steps
      const ExpertStats& s = model.expert_stats();
      const int64_t tokens = int64_t(prompt().size()) + 2;
      EXPECT_EQ(s.tokens, tokens);
      ASSERT_EQ(s.n_layers, model.config().n_layers);
      ASSERT_EQ(s.n_experts, 8);
      ASSERT_EQ(s.counts.size(), size_t(s.n_layers * s.n_experts));
      for (int l = 0; l < s.n_layers; ++l) {
        int64_t sum = 0, used = 0;
        for (int e = 0; e < s.n_experts; ++e) {
          sum += s.at(l, e);
          used += s.at(l, e) > 0;
          EXPECT_LE(s.at(l, e), tokens) << "an expert is chosen at most once per token";
        }
        EXPECT_EQ(sum, tokens * s.k) << "layer " << l;
        EXPECT_GE(used, s.k) << "layer " << l;
      }
      const std::string table = expert_stats_table(s);
      EXPECT_NE(table.find("layer   1 |"), std::string::npos) << table;
      model.set_collect_expert_stats(false);
      ASSERT_TRUE(eval_logits(model, {256, 65}, 2, &out, DType::kF32).ok());
      EXPECT_EQ(model.expert_stats().tokens, tokens) << "off again: nothing more counted";
      model.reset_expert_stats();
      EXPECT_EQ(model.expert_stats().tokens, 0);
    }
  }
}

}  // namespace
}  // namespace tessera

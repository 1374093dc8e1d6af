// A step that mixes sequences of different LoRA adapters and of the base model
// (StepPlan::lora_slots, docs/lora.md): each sequence's logits equal those of the same sequence run
// alone under its adapter (Model::set_default_lora), on the CPU and on Vulkan. Two PEFT adapters
// are written here for a tiny random llama: rank 8 over all seven projections, and rank 4
// (rsLoRA) over q and v only, so the slot tensors mix ranks and a weight one adapter leaves out.
// Also: a slot that is not loaded is an error naming it, and an adapter moves the logits (so the
// equalities above mean something).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "models/model.h"
#include "tests/kv/test_devices.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

struct StTensor {
  std::string name;
  int64_t rows, cols;
  std::vector<float> data;
};

// adapter_config.json and an F32 adapter_model.safetensors, as PEFT saves them.
void write_adapter(const std::string& dir, int r, double alpha, bool rslora, const std::vector<std::string>& targets,
                   const std::vector<StTensor>& tensors) {
  std::filesystem::create_directories(dir);
  std::string cfg = R"({"peft_type": "LORA", "r": )" + std::to_string(r) + R"(, "lora_alpha": )" +
                    std::to_string(alpha) + R"(, "use_rslora": )" + (rslora ? "true" : "false") +
                    R"(, "bias": "none", "target_modules": [)";
  for (size_t i = 0; i < targets.size(); ++i) cfg += (i ? ", \"" : "\"") + targets[i] + "\"";
  std::ofstream(dir + "/adapter_config.json") << cfg << "]}";
  std::string header = "{";
  size_t offset = 0;
  for (const StTensor& t : tensors) {
    const size_t bytes = t.data.size() * 4;
    header += (offset ? ",\"" : "\"") + t.name + R"(":{"dtype":"F32","shape":[)" + std::to_string(t.rows) + "," +
              std::to_string(t.cols) + R"(],"data_offsets":[)" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  std::ofstream f(dir + "/adapter_model.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(header.data(), std::streamsize(header.size()));
  for (const StTensor& t : tensors)
    f.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size() * 4));
}

// Random lora_A [r, K] ~ U(-1, 1) / sqrt(K) and lora_B [N, r] ~ U(-1, 1) / sqrt(r) (PEFT starts B
// at zero; random here so that the delta shows) for |modules| of every layer.
std::vector<StTensor> random_adapter(const ModelConfig& c, int r, const std::vector<std::string>& modules,
                                     uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t D = c.n_embd, Q = int64_t(c.n_heads) * c.head_dim, KV = int64_t(c.n_kv_heads) * c.head_dim;
  std::vector<StTensor> out;
  for (int l = 0; l < c.n_layers; ++l)
    for (const std::string& m : modules) {
      int64_t N = D, K = D;
      if (m == "self_attn.q_proj") N = Q;
      if (m == "self_attn.k_proj" || m == "self_attn.v_proj") N = KV;
      if (m == "self_attn.o_proj") K = Q;
      if (m == "mlp.gate_proj" || m == "mlp.up_proj") N = c.n_ff;
      if (m == "mlp.down_proj") K = c.n_ff;
      const std::string p = "base_model.model.model.layers." + std::to_string(l) + "." + m;
      StTensor a{p + ".lora_A.weight", r, K, std::vector<float>(size_t(r * K))};
      StTensor b{p + ".lora_B.weight", N, r, std::vector<float>(size_t(N * r))};
      for (float& v : a.data) v = u(rng) / std::sqrt(float(K));
      for (float& v : b.data) v = u(rng) / std::sqrt(float(r));
      out.push_back(std::move(a));
      out.push_back(std::move(b));
    }
  return out;
}

// Sequences |lens| (prompt tokens from |seed|), sequence s in KV block s, logits of each last row.
StepPlan prefill_plan(const std::vector<int>& lens, const std::vector<int32_t>& slots, uint32_t seed, int block_size) {
  StepPlan p;
  p.query_start = {0};
  p.max_blocks = 1;
  for (size_t s = 0; s < lens.size(); ++s) {
    for (int i = 0; i < lens[s]; ++i) {
      p.tokens.push_back(int32_t((seed * 2654435761u + uint32_t(s * 131 + i) * 40503u) % 200u) + 3);
      p.positions.push_back(i);
      p.slot_mapping.push_back(int32_t(s) * block_size + i);
    }
    p.query_start.push_back(p.query_start.back() + lens[s]);
    p.seq_lens.push_back(lens[s]);
    p.block_tables.push_back(int32_t(s));
    p.logit_rows.push_back(p.query_start.back() - 1);
  }
  p.lora_slots = slots;
  return p;
}

double rel_diff(const float* a, const float* b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TEST(LoraMixedStep, EachSequenceGetsItsOwnAdapter) {
  const std::string dir = testing::process_temp_dir("lora_mixed_step");
  const std::string path = dir + "/tiny.gguf";
  ASSERT_EQ(testing::run_make_tiny_model("--arch llama --dtype f32 --seed 11 --out " + path), "");
  const std::vector<std::string> all = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  const std::vector<std::string> qv = {"self_attn.q_proj", "self_attn.v_proj"};
  for (auto& [name, dev] : testing::cpu_and_unmapped_vulkan(2)) {
    SCOPED_TRACE(name);
    auto m = Model::load(path, dev);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Model& model = **m;
    const ModelConfig& c = model.config();
    write_adapter(dir + "/all", 8, 16.0, false,
                  {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
                  random_adapter(c, 8, all, 1));
    write_adapter(dir + "/qv", 4, 6.0, true, {"q_proj", "v_proj"}, random_adapter(c, 4, qv, 2));
    auto s0 = model.add_lora("all", dir + "/all");
    ASSERT_TRUE(s0.ok()) << s0.status().to_string();
    auto s1 = model.add_lora("qv", dir + "/qv");
    ASSERT_TRUE(s1.ok()) << s1.status().to_string();
    ASSERT_EQ(*s0, 0);
    ASSERT_EQ(*s1, 1);
    EXPECT_FLOAT_EQ(model.loras()[1].scale, float(6.0 / std::sqrt(4.0)));  // rsLoRA: alpha / sqrt(r)

    const std::vector<int> lens = {5, 1, 3, 2, 4};
    const std::vector<int32_t> slots = {0, -1, 1, 0, 1};
    const int bs = 16;
    const size_t V = size_t(model.vocab_size());
    auto kv = model.create_kv_cache(int64_t(lens.size()) * bs, DType::kF32, bs);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    std::vector<float> mixed;
    ASSERT_TRUE(model.forward(prefill_plan(lens, slots, 5, bs), **kv, &mixed).ok());
    ASSERT_EQ(mixed.size(), lens.size() * V);

    for (size_t s = 0; s < lens.size(); ++s) {
      SCOPED_TRACE("sequence " + std::to_string(s) + " (slot " + std::to_string(slots[s]) + ")");
      // The same tokens alone, under the model's default adapter.
      StepPlan one = prefill_plan(lens, slots, 5, bs);
      const int32_t b = one.query_start[s], e = one.query_start[s + 1];
      StepPlan p;
      p.tokens.assign(one.tokens.begin() + b, one.tokens.begin() + e);
      for (int32_t i = 0; i < e - b; ++i) {
        p.positions.push_back(i);
        p.slot_mapping.push_back(i);
      }
      p.query_start = {0, e - b};
      p.seq_lens = {e - b};
      p.max_blocks = 1;
      p.block_tables = {0};
      p.logit_rows = {e - b - 1};
      ASSERT_TRUE(model.set_default_lora(slots[s]).ok());
      auto kv1 = model.create_kv_cache(bs, DType::kF32, bs);
      ASSERT_TRUE(kv1.ok());
      std::vector<float> alone;
      ASSERT_TRUE(model.forward(p, **kv1, &alone).ok());
      // The same arithmetic in another batch: only the row blocking of the matmuls differs.
      EXPECT_LT(rel_diff(mixed.data() + s * V, alone.data(), V), 1e-5);
      // Under another adapter the logits move, so the equality above is the adapter's own.
      ASSERT_TRUE(model.set_default_lora(slots[s] == 1 ? 0 : slots[s] + 1).ok());
      std::vector<float> other;
      ASSERT_TRUE(model.forward(p, **kv1, &other).ok());
      EXPECT_GT(rel_diff(other.data(), alone.data(), V), 1e-3);
    }

    // A slot that is not loaded: an error naming it, from the plan and from set_default_lora.
    StepPlan bad = prefill_plan({2}, {2}, 5, bs);
    const Status st = model.forward(bad, **kv, &mixed);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("slot 2 is not loaded"), std::string::npos) << st.to_string();
    EXPECT_FALSE(model.set_default_lora(2).ok());
    // Another adapter under a name already loaded is refused and leaves the two in place.
    auto again = model.add_lora("qv", dir + "/all");
    EXPECT_FALSE(again.ok());
    EXPECT_EQ(model.loras().size(), 2u);
  }
}

}  // namespace
}  // namespace tessera

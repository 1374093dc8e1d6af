// A step that mixes sequences of different LoRA adapters and of the base model
// (StepPlan::lora_slots, docs/lora.md): each sequence's logits equal those of the same sequence run
// alone under its adapter (Model::set_default_lora), on the CPU and on Vulkan. Two PEFT adapters
// are written here for a tiny random llama: rank 8 over all seven projections, and rank 4
// (rsLoRA) over q and v only, so the slot tensors mix ranks and a weight one adapter leaves out.
// Also: a slot that is not loaded is an error naming it, and an adapter moves the logits (so the
// equalities above mean something).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/kv/block_pool.h"
#include "core/sched/engine.h"
#include "models/lora/merge.h"
#include "models/model.h"
#include "tests/kv/test_devices.h"
#include "tests/support/peft_writer.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

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

// Sequence |s| of |all| alone in a step of its own (KV block 0, its last row's logits, no
// adapter slots: the caller sets them or the model's default applies).
StepPlan alone_plan(const StepPlan& all, size_t s) {
  const int32_t b = all.query_start[s], e = all.query_start[s + 1];
  StepPlan p;
  p.tokens.assign(all.tokens.begin() + b, all.tokens.begin() + e);
  for (int32_t i = 0; i < e - b; ++i) {
    p.positions.push_back(i);
    p.slot_mapping.push_back(i);
  }
  p.query_start = {0, e - b};
  p.seq_lens = {e - b};
  p.max_blocks = 1;
  p.block_tables = {0};
  p.logit_rows = {e - b - 1};
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
    testing::write_peft_adapter(dir + "/all", 8, 16.0, false,
                                {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
                                testing::random_peft_adapter(c, 8, all, 1));
    testing::write_peft_adapter(dir + "/qv", 4, 6.0, true, {"q_proj", "v_proj"},
                                testing::random_peft_adapter(c, 4, qv, 2));
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
      StepPlan p = alone_plan(prefill_plan(lens, slots, 5, bs), s);
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

// One MoE family (mixtral: llama attention beside routed experts): adapters on the attention
// projections of a step mixing two adapters and the base model give each sequence its logits
// alone, on the CPU and Vulkan; an adapter on an expert is refused, naming it (LoRA on experts is
// not supported yet).
TEST(LoraMixedStep, MoeModelAttentionAdapters) {
  const std::string dir = testing::process_temp_dir("lora_mixed_step_moe");
  const std::string path = dir + "/tiny-moe.gguf";
  ASSERT_EQ(testing::run_make_tiny_model("--arch mixtral --dtype f32 --seed 13 --out " + path), "");
  const std::vector<std::string> attn = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                         "self_attn.o_proj"};
  for (auto& [name, dev] : testing::cpu_and_unmapped_vulkan(2)) {
    SCOPED_TRACE(name);
    auto m = Model::load(path, dev);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Model& model = **m;
    testing::write_peft_adapter(dir + "/attn8", 8, 16.0, false, {"q_proj", "k_proj", "v_proj", "o_proj"},
                                testing::random_peft_adapter(model.config(), 8, attn, 3));
    testing::write_peft_adapter(
        dir + "/qv4", 4, 8.0, false, {"q_proj", "v_proj"},
        testing::random_peft_adapter(model.config(), 4, {"self_attn.q_proj", "self_attn.v_proj"}, 4));
    ASSERT_TRUE(model.add_lora("attn8", dir + "/attn8").ok());
    ASSERT_TRUE(model.add_lora("qv4", dir + "/qv4").ok());
    const std::vector<int> lens = {4, 2, 5, 1};
    const std::vector<int32_t> slots = {1, -1, 0, 1};
    const int bs = 16;
    const size_t V = size_t(model.vocab_size());
    auto kv = model.create_kv_cache(int64_t(lens.size()) * bs, DType::kF32, bs);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    std::vector<float> mixed;
    ASSERT_TRUE(model.forward(prefill_plan(lens, slots, 7, bs), **kv, &mixed).ok());
    for (size_t s = 0; s < lens.size(); ++s) {
      SCOPED_TRACE("sequence " + std::to_string(s));
      StepPlan p = alone_plan(prefill_plan(lens, slots, 7, bs), s);
      p.lora_slots = {slots[s]};
      auto kv1 = model.create_kv_cache(bs, DType::kF32, bs);
      ASSERT_TRUE(kv1.ok());
      std::vector<float> alone, base;
      ASSERT_TRUE(model.forward(p, **kv1, &alone).ok());
      EXPECT_LT(rel_diff(mixed.data() + s * V, alone.data(), V), 1e-5);
      if (slots[s] < 0) continue;
      p.lora_slots = {-1};
      ASSERT_TRUE(model.forward(p, **kv1, &base).ok());
      EXPECT_GT(rel_diff(alone.data(), base.data(), V), 1e-3) << "the adapter moves the logits";
    }
    // An adapter on an expert's projection: refused, naming the module.
    testing::StTensor ea{"base_model.model.model.layers.0.block_sparse_moe.experts.0.w1.lora_A.weight", 4,
                         model.config().n_embd, std::vector<float>(size_t(4 * model.config().n_embd), 0.01f)};
    testing::StTensor eb{"base_model.model.model.layers.0.block_sparse_moe.experts.0.w1.lora_B.weight", 8, 4,
                         std::vector<float>(32, 0.01f)};
    testing::write_peft_adapter(dir + "/expert", 4, 8.0, false, {"w1"}, {ea, eb});
    const Status st = model.add_lora("expert", dir + "/expert").status();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("experts.0.w1"), std::string::npos) << st.to_string();
    EXPECT_EQ(model.loras().size(), 2u);

    // Merged offline (merge_lora_to_gguf, `tessera convert --merge-lora`): the merged MoE model
    // without adapters gives the unmerged adapter's logits.
    const std::string merged_path = dir + "/merged-attn8-" + name + ".gguf";
    auto merged_stats = merge_lora_to_gguf(path, dir + "/attn8", merged_path, dev, {});
    ASSERT_TRUE(merged_stats.ok()) << merged_stats.status().to_string();
    EXPECT_EQ(merged_stats->merged_tensors, 4 * model.config().n_layers);
    auto mm = Model::load(merged_path, dev);
    ASSERT_TRUE(mm.ok()) << mm.status().to_string();
    auto kv2 = model.create_kv_cache(int64_t(lens.size()) * bs, DType::kF32, bs);
    auto kv3 = (*mm)->create_kv_cache(int64_t(lens.size()) * bs, DType::kF32, bs);
    ASSERT_TRUE(kv2.ok() && kv3.ok());
    std::vector<float> unmerged, merged;
    ASSERT_TRUE(model.forward(prefill_plan(lens, {0, 0, 0, 0}, 9, bs), **kv2, &unmerged).ok());
    ASSERT_TRUE((*mm)->forward(prefill_plan(lens, {}, 9, bs), **kv3, &merged).ok());
    ASSERT_EQ(merged.size(), unmerged.size());
    EXPECT_LT(rel_diff(merged.data(), unmerged.data(), merged.size()), 1e-5);
  }
}

// Records the adapter of every block the prefix cache stores (the source of KV events).
struct LoraRecorder : BlockEventSink {
  std::map<int32_t, int> stored;  // blocks by lora_id
  void on_block_stored(BlockHash, BlockHash, std::span<const int32_t>, int32_t lora_id) override { ++stored[lora_id]; }
  void on_block_removed(BlockHash) override {}
};

// Through the engine: requests of two adapters and of the base model run together and each gets
// the tokens it gets alone; the same prompt under two adapters is two prefix-cache chains (the
// second finds nothing cached, the first's again finds its own blocks), and the stored blocks
// carry their adapter's id.
TEST(LoraEngine, RequestsChooseTheirAdapterAndNeverShareKv) {
  const std::string dir = testing::process_temp_dir("lora_engine");
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
    testing::write_peft_adapter(dir + "/all", 8, 16.0, false,
                                {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"},
                                testing::random_peft_adapter(model.config(), 8, all, 1));
    testing::write_peft_adapter(dir + "/qv", 4, 6.0, true, {"q_proj", "v_proj"},
                                testing::random_peft_adapter(model.config(), 4, qv, 2));
    ASSERT_TRUE(model.add_lora("all", dir + "/all").ok());
    ASSERT_TRUE(model.add_lora("qv", dir + "/qv").ok());
    EXPECT_EQ(model.add_lora("third", dir + "/all", {.max_loras = 2}).status().code(), StatusCode::kResourceExhausted);
    const Status rank = model.add_lora("third", dir + "/all", {.max_rank = 4}).status();
    EXPECT_NE(rank.message().find("rank 8, above --max-lora-rank 4"), std::string::npos) << rank.to_string();

    auto kv = model.create_kv_cache(1024, DType::kF32, 16);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    LoraRecorder events;
    (*kv)->pool().set_event_sink(&events);
    EngineConfig ec;
    ec.scheduler.itl_factor = 0;  // plans independent of timing
    Engine engine(model, **kv, model.codec(), ec);
    std::map<RequestId, std::vector<int32_t>> out;
    std::map<RequestId, int32_t> cached;
    auto submit = [&](const std::vector<int32_t>& p, int32_t lora) {
      GenerationRequest r;
      r.prompt = p;
      r.sampling = SamplingParams::greedy();
      r.max_tokens = 6;
      r.ignore_eos = true;
      r.lora = lora;
      r.on_token = [&](const TokenEvent& ev) {
        if (ev.token >= 0) out[ev.id].push_back(ev.token);
        if (ev.metrics) cached[ev.id] = ev.metrics->cached_tokens;
      };
      auto id = engine.submit(std::move(r));
      EXPECT_TRUE(id.ok()) << id.status().to_string();
      return id.ok() ? *id : RequestId(-1);
    };
    std::vector<std::vector<int32_t>> prompts;
    for (uint32_t s = 0; s < 4; ++s) {
      std::vector<int32_t> p;
      for (int i = 0; i < 9 + int(s) * 7; ++i)
        p.push_back(int32_t((s * 2654435761u + uint32_t(i) * 40503u) % 200u) + 3);
      prompts.push_back(p);
    }
    const std::vector<int32_t> loras = {0, -1, 1, 0};
    // Alone, one after another (no prefix caching shared across adapters: checked below).
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const RequestId id = submit(prompts[i], loras[i]);
      ASSERT_TRUE(engine.run_until_idle().ok());
      alone.push_back(out[id]);
    }
    EXPECT_NE(alone[0], alone[3]) << "different prompts";
    // Together: one step holds every request's prefill, then their decodes.
    std::vector<RequestId> ids;
    for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(submit(prompts[i], loras[i]));
    ASSERT_TRUE(engine.run_until_idle().ok());
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(out[ids[i]], alone[i]) << "request " << i << " (slot " << loras[i] << ")";

    // The same 40-token prompt under adapter 0, then 1, then the base model, then 0 again.
    std::vector<int32_t> shared;
    for (int i = 0; i < 40; ++i) shared.push_back(int32_t((7u + uint32_t(i) * 97u) % 200u) + 3);
    std::vector<RequestId> order;
    for (int32_t lora : {0, 1, -1, 0}) {
      order.push_back(submit(shared, lora));
      ASSERT_TRUE(engine.run_until_idle().ok());
    }
    EXPECT_EQ(cached[order[1]], 0) << "adapter 1 must not read adapter 0's K/V";
    EXPECT_EQ(cached[order[2]], 0) << "nor the base model";
    EXPECT_EQ(cached[order[3]], 32) << "adapter 0 finds its own two full blocks again";
    EXPECT_NE(out[order[0]], out[order[1]]) << "the adapters change the tokens, so sharing would show";
    EXPECT_EQ(out[order[0]], out[order[3]]);
    // Stored blocks carry the adapter's id (slot + 1; the base model's are 0).
    EXPECT_GT(events.stored[1], 0);
    EXPECT_GT(events.stored[2], 0);
    EXPECT_GT(events.stored[0], 0);
    EXPECT_EQ(events.stored.size(), 3u);

    // A slot that is not loaded is refused at submit, naming it.
    GenerationRequest bad;
    bad.prompt = {5, 6};
    bad.lora = 2;
    const Status st = engine.submit(std::move(bad)).status();
    EXPECT_NE(st.message().find("slot 2 is not loaded"), std::string::npos) << st.to_string();
    (*kv)->pool().set_event_sink(nullptr);
  }
}

// More adapters than device slots (--max-loras 2, --max-cpu-loras 4): requests of four adapters
// and of the base model submitted together each get the tokens they get alone, the adapters
// taking turns in the two slots (copied in as steps need them); a step naming three adapters is
// refused, naming the slots; loading beyond --max-cpu-loras is refused, naming it.
TEST(LoraEngine, MoreAdaptersThanDeviceSlotsTakeTurnsAndMatchAlone) {
  const std::string dir = testing::process_temp_dir("lora_slots");
  const std::string path = dir + "/tiny.gguf";
  ASSERT_EQ(testing::run_make_tiny_model("--arch llama --dtype f32 --seed 17 --out " + path), "");
  const std::vector<std::string> qv = {"self_attn.q_proj", "self_attn.v_proj"};
  const std::vector<std::string> ffn = {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
  for (auto& [name, dev] : testing::cpu_and_unmapped_vulkan(2)) {
    SCOPED_TRACE(name);
    auto m = Model::load(path, dev);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Model& model = **m;
    const LoraLimits limits{.max_loras = 2, .max_rank = 0, .max_cpu_loras = 4};
    for (int i = 0; i < 4; ++i) {
      const int r = 4 + 2 * i;
      const auto& targets = i % 2 ? ffn : qv;
      const std::string a = dir + "/a" + std::to_string(i);
      testing::write_peft_adapter(a, r, 2.0 * r, false,
                                  i % 2 ? std::vector<std::string>{"gate_proj", "up_proj", "down_proj"}
                                        : std::vector<std::string>{"q_proj", "v_proj"},
                                  testing::random_peft_adapter(model.config(), r, targets, uint32_t(20 + i)));
      auto slot = model.add_lora("a" + std::to_string(i), a, limits);
      ASSERT_TRUE(slot.ok()) << slot.status().to_string();
    }
    EXPECT_EQ(model.lora_device_slots(), 2);
    const Status cap = model.add_lora("a4", dir + "/a0", limits).status();
    EXPECT_EQ(cap.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(cap.message().find("--max-cpu-loras allows (4)"), std::string::npos) << cap.to_string();
    {
      auto kv = model.create_kv_cache(3 * 16, DType::kF32, 16);
      ASSERT_TRUE(kv.ok());
      std::vector<float> logits;
      const Status three = model.forward(prefill_plan({3, 2, 4}, {0, 1, 2}, 5, 16), **kv, &logits);
      EXPECT_EQ(three.code(), StatusCode::kResourceExhausted);
      EXPECT_NE(three.message().find("more than the 2 device slots"), std::string::npos) << three.to_string();
    }

    auto kv = model.create_kv_cache(1024, DType::kF32, 16);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    EngineConfig ec;
    ec.scheduler.itl_factor = 0;  // plans independent of timing
    Engine engine(model, **kv, model.codec(), ec);
    std::map<RequestId, std::vector<int32_t>> out;
    auto submit = [&](size_t i, int32_t lora) {
      GenerationRequest r;
      for (int t = 0; t < 6 + int(i) * 3; ++t)
        r.prompt.push_back(int32_t((uint32_t(i) * 7919u + uint32_t(t) * 104729u) % 200u) + 3);
      r.sampling = SamplingParams::greedy();
      r.max_tokens = 5 + int(i % 3);
      r.ignore_eos = true;
      r.lora = lora;
      r.on_token = [&](const TokenEvent& ev) {
        if (ev.token >= 0) out[ev.id].push_back(ev.token);
      };
      auto id = engine.submit(std::move(r));
      EXPECT_TRUE(id.ok()) << id.status().to_string();
      return id.ok() ? *id : RequestId(-1);
    };
    const std::vector<int32_t> loras = {0, 1, 2, -1, 3, 2, 0, 3};
    std::vector<std::vector<int32_t>> alone;
    for (size_t i = 0; i < loras.size(); ++i) {
      const RequestId id = submit(i, loras[i]);
      ASSERT_TRUE(engine.run_until_idle().ok());
      alone.push_back(out[id]);
    }
    const int64_t loads_before = model.lora_loads();
    std::vector<RequestId> ids;
    for (size_t i = 0; i < loras.size(); ++i) ids.push_back(submit(i, loras[i]));
    ASSERT_TRUE(engine.run_until_idle().ok());
    for (size_t i = 0; i < loras.size(); ++i)
      EXPECT_EQ(out[ids[i]], alone[i]) << "request " << i << " (adapter " << loras[i] << ")";
    EXPECT_GE(model.lora_loads() - loads_before, 2) << "adapters took turns in the slots";
    // One prompt under each adapter and the base model: the adapters change the tokens, so a
    // slot holding the wrong adapter would show above.
    std::set<std::vector<int32_t>> distinct;
    for (int32_t lora : {-1, 0, 1, 2, 3}) {
      const RequestId id = submit(1, lora);
      ASSERT_TRUE(engine.run_until_idle().ok());
      distinct.insert(out[id]);
    }
    EXPECT_GE(distinct.size(), 4u);
  }
}

// Per-request scales (GenerationRequest::lora_scale, llama.cpp's "scale"): adapter A at 0.5 gives
// the tokens of adapter A' (A's lora_A, half its lora_B) at 1, alone and in one batch with A at 1
// and the base model; 0 is the base model; each scale keeps prefix-cache blocks of its own; a
// non-finite scale is refused. With one device slot per (adapter, scale) pair, A at two scales
// takes two slots (checked with --max-loras 2 beside the half adapter).
TEST(LoraEngine, PerRequestScalesMultiplyTheAdapter) {
  const std::string dir = testing::process_temp_dir("lora_scales");
  const std::string path = dir + "/tiny.gguf";
  ASSERT_EQ(testing::run_make_tiny_model("--arch llama --dtype f32 --seed 23 --out " + path), "");
  const std::vector<std::string> all = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
  const std::vector<std::string> modules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                            "gate_proj", "up_proj", "down_proj"};
  for (auto& [name, dev] : testing::cpu_and_unmapped_vulkan(2)) {
    SCOPED_TRACE(name);
    auto m = Model::load(path, dev);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Model& model = **m;
    std::vector<testing::StTensor> full = testing::random_peft_adapter(model.config(), 8, all, 31);
    std::vector<testing::StTensor> half = full;
    for (testing::StTensor& t : half)
      if (t.name.find("lora_B") != std::string::npos)
        for (float& v : t.data) v *= 0.5f;
    testing::write_peft_adapter(dir + "/full", 8, 16.0, false, modules, full);
    testing::write_peft_adapter(dir + "/half", 8, 16.0, false, modules, half);
    const LoraLimits limits{.max_loras = 2, .max_rank = 0, .max_cpu_loras = 2};
    ASSERT_TRUE(model.add_lora("full", dir + "/full", limits).ok());
    ASSERT_TRUE(model.add_lora("half", dir + "/half", limits).ok());

    auto kv = model.create_kv_cache(1024, DType::kF32, 16);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    EngineConfig ec;
    ec.scheduler.itl_factor = 0;
    Engine engine(model, **kv, model.codec(), ec);
    std::map<RequestId, std::vector<int32_t>> out;
    std::map<RequestId, int32_t> cached;
    auto submit = [&](const std::vector<int32_t>& prompt, int32_t lora, float scale) -> Result<RequestId> {
      GenerationRequest r;
      r.prompt = prompt;
      r.sampling = SamplingParams::greedy();
      r.max_tokens = 6;
      r.ignore_eos = true;
      r.lora = lora;
      r.lora_scale = scale;
      r.on_token = [&](const TokenEvent& ev) {
        if (ev.token >= 0) out[ev.id].push_back(ev.token);
        if (ev.metrics) cached[ev.id] = ev.metrics->cached_tokens;
      };
      return engine.submit(std::move(r));
    };
    auto alone = [&](const std::vector<int32_t>& prompt, int32_t lora, float scale) {
      auto id = submit(prompt, lora, scale);
      EXPECT_TRUE(id.ok()) << id.status().to_string();
      EXPECT_TRUE(engine.run_until_idle().ok());
      return id.ok() ? *id : RequestId(-1);
    };
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(int32_t((11u + uint32_t(i) * 131u) % 200u) + 3);
    const RequestId at_half = alone(prompt, 0, 0.5f), half_at_one = alone(prompt, 1, 1.0f);
    const RequestId at_one = alone(prompt, 0, 1.0f), at_zero = alone(prompt, 0, 0.0f), base = alone(prompt, -1, 1.0f);
    EXPECT_EQ(out[at_half], out[half_at_one]) << "0.5 x (A, B) == (A, B / 2)";
    EXPECT_NE(out[at_one], out[at_half]) << "the scale changes the tokens";
    EXPECT_EQ(out[at_zero], out[base]) << "scale 0 is the base model";
    // Prefix cache: 0.5 was the first run of this prompt; 1 then found nothing of 0.5's (0 cached),
    // the base model (scale 0) finds the base run's blocks... and 0.5 again finds its own.
    EXPECT_EQ(cached[at_one], 0) << "scale 1 must not read scale 0.5's K/V";
    const RequestId again = alone(prompt, 0, 0.5f);
    EXPECT_EQ(cached[again], 32);
    EXPECT_EQ(out[again], out[at_half]);
    // Together: A at 0.5, A at 1 and the base model need 2 slots; A' waits for one.
    std::vector<int32_t> p2(prompt.begin(), prompt.begin() + 23);
    const std::vector<std::pair<int32_t, float>> mix = {{0, 0.5f}, {0, 1.0f}, {-1, 1.0f}, {1, 1.0f}, {0, 0.5f}};
    std::vector<std::vector<int32_t>> solo;
    for (const auto& [lora, scale] : mix) solo.push_back(out[alone(p2, lora, scale)]);
    std::vector<RequestId> ids;
    for (const auto& [lora, scale] : mix) {
      auto id = submit(p2, lora, scale);
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      ids.push_back(*id);
    }
    ASSERT_TRUE(engine.run_until_idle().ok());
    for (size_t i = 0; i < mix.size(); ++i) EXPECT_EQ(out[ids[i]], solo[i]) << "request " << i;
    EXPECT_EQ(solo[0], solo[3]);
    const Status nan = submit(p2, 0, std::numeric_limits<float>::quiet_NaN()).status();
    EXPECT_NE(nan.message().find("LoRA scale must be a finite number"), std::string::npos) << nan.to_string();
  }
}

}  // namespace
}  // namespace tessera

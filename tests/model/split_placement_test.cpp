// A model placed across two devices (docs/multi-device.md): the last N layers on the main device
// and the rest on the host (llama.cpp's -ngl), the routed experts on the host with attention on
// the main device (--cpu-moe), and tensor-name overrides (-ot), give the logits of the same model
// on the main device alone, at every split point; the engine (batching, prefix cache, preemption
// by swap) gives the same greedy tokens on a split model; bad placements are refused by name.
// The main device is a second CPU device (always: the split logic, the copies between devices
// and the per-device KV cache, exactly), the Vulkan device and the CUDA simulator where they are
// found (different kernels on each side: within f32 tolerance). Tiny random f32 models
// (make_tiny_model).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "core/registry.h"
#include "core/sched/engine.h"
#include "core/sched/ngram_proposer.h"
#include "models/gguf/gguf.h"
#include "models/model.h"
#include "tests/model/vulkan_vs_cpu.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

constexpr int kLayers = 4;

class SplitPlacement : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::process_temp_dir("tessera_split_placement");
    for (const char* arch : {"llama", "qwen3", "mixtral"})
      ASSERT_EQ(testing::run_make_tiny_model(std::string("--arch ") + arch + " --dtype f32 --layers " +
                                             std::to_string(kLayers) + " --out " + path(arch)),
                "");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& arch) { return dir_ + "/" + arch + ".gguf"; }

  void SetUp() override {
    auto cpu = Registry::global().find("cpu");
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    host_ = *cpu;
    if (GetParam() == "cpu") {
      main_ = make_cpu_device(1);  // a second CPU device: another Device, its own memory and queue
      tol_ = 1e-6;
    } else {
      // Vulkan (lavapipe here), or the CUDA kernels on the GPU simulator (CTest sets
      // TESSERA_CUDA_SIM=1 for this test).
      auto gpu = Registry::global().find(GetParam());
      // The simulator needs no hardware: it is always there (unit_gpu checks the same).
      ASSERT_TRUE(gpu.ok() || GetParam() != "cuda-sim") << gpu.status().to_string();
      if (!gpu.ok()) TESSERA_SKIP_HARDWARE() << "no " << GetParam() << " device: " << gpu.status().to_string();
      main_ = *gpu;
      tol_ = 1e-4;
    }
  }

  std::unique_ptr<Model> load(const std::string& arch, const PlacementOptions& p = {}) {
    LoadOptions lo;
    lo.placement = p;
    auto m = Model::load(path(arch), main_, lo);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  PlacementOptions layers(int n) const {
    PlacementOptions p;
    p.host = host_;
    p.main_layers = n;
    return p;
  }
  void expect_same_logits(Model& alone, Model& split, const std::string& what) {
    SCOPED_TRACE(what + " on " + main_->info().id + " + " + host_->info().id);
    model_test::expect_models_match(alone, split, "one device", "split", {"The capital of France", "abc abc abc d"}, 6,
                                    DType::kF32, tol_, false);
  }

  static std::string dir_;
  DevicePtr host_, main_;
  double tol_ = 0;
};
std::string SplitPlacement::dir_;

TEST_P(SplitPlacement, LayerSplitsGiveTheOneDeviceLogits) {
  for (const char* arch : {"llama", "qwen3"}) {  // a separate output head, a tied one
    auto alone = load(arch);
    ASSERT_TRUE(alone);
    for (int n : {0, 1, 2, kLayers, kLayers + 1}) {
      auto split = load(arch, layers(n));
      ASSERT_TRUE(split);
      const Placement& pl = split->placement();
      ASSERT_TRUE(pl.split());
      for (int l = 0; l < kLayers; ++l)
        EXPECT_EQ(&pl.layer_device(l), l >= kLayers - n ? main_.get() : host_.get()) << "layer " << l << " n " << n;
      // The weights really are on both devices (the token embedding is always on the host).
      const auto bytes = split->weight_bytes_per_device();
      ASSERT_EQ(bytes.size(), 2u) << pl.describe(kLayers);
      EXPECT_EQ(bytes[0].first, main_.get());
      EXPECT_EQ(bytes[0].second > 0, n > 0) << pl.describe(kLayers);
      expect_same_logits(*alone, *split, std::string(arch) + " --gpu-layers " + std::to_string(n));
      if (n > 0 && n <= kLayers) {
        EXPECT_GT(split->split_stats().copies, 0);
        EXPECT_GE(split->split_stats().segments, 2);
      }
    }
  }
}

TEST_P(SplitPlacement, KvCacheLivesWithItsLayer) {
  auto split = load("llama", layers(2));
  ASSERT_TRUE(split);
  auto kv = split->create_kv_cache(256, DType::kF32);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  for (int l = 0; l < kLayers; ++l) {
    Device& want = l >= kLayers - 2 ? *main_ : *host_;
    EXPECT_EQ(&(*kv)->layer_device(l), &want);
    EXPECT_EQ((*kv)->k(l).buffer->device(), &want) << "layer " << l;
    EXPECT_EQ((*kv)->v(l).buffer->device(), &want) << "layer " << l;
  }
  // Swap space on each device for its own layers: one block of every layer per slot in all.
  ASSERT_TRUE((*kv)->reserve_swap(3).ok());
  EXPECT_EQ((*kv)->swap_bytes(), 3 * (*kv)->group_block_bytes(false));
}

TEST_P(SplitPlacement, ExpertsOnTheHostAttentionOnTheMainDevice) {
  auto alone = load("mixtral");
  ASSERT_TRUE(alone);
  PlacementOptions p;
  p.host = host_;
  p.experts_on_host = true;
  auto split = load("mixtral", p);
  ASSERT_TRUE(split);
  for (const Tensor* t : split->weight_tensors()) {
    const bool expert = t->name.find("_exps") != std::string::npos;
    const bool embd = t->name.rfind("token_embd", 0) == 0;
    EXPECT_EQ(t->buffer->device(), expert || embd ? host_.get() : main_.get()) << t->name;
  }
  expect_same_logits(*alone, *split, "mixtral --cpu-moe");
  // Per layer: attention and router on the main device, the experts on the host, back again.
  EXPECT_GE(split->split_stats().segments, 2 * kLayers);

  // The same through an override: only layer 1's experts on the host.
  PlacementOptions o;
  o.host = host_;
  o.overrides = {{"^blk\\.1\\..*_exps", "cpu"}};
  auto one = load("mixtral", o);
  ASSERT_TRUE(one);
  for (const Tensor* t : one->weight_tensors()) {
    const bool moved = t->name.rfind("blk.1.", 0) == 0 && t->name.find("_exps") != std::string::npos;
    const bool embd = t->name.rfind("token_embd", 0) == 0;
    EXPECT_EQ(t->buffer->device(), moved || embd ? host_.get() : main_.get()) << t->name;
  }
  expect_same_logits(*alone, *one, "mixtral -ot ^blk\\.1\\..*_exps=cpu");
}

// |n| token ids from |seed| (byte tokens).
std::vector<int32_t> prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(rng() % 250u));
  return p;
}

// Greedy tokens of |prompts| through the engine over a KV cache of |kv_tokens|, the first alone
// and then the others together; shared prefixes hit the prefix cache, and a small cache preempts
// (by swap when |swap|).
std::vector<std::vector<int32_t>> generate(Model& m, const std::vector<std::vector<int32_t>>& prompts,
                                           int64_t kv_tokens, bool swap, EngineStats* stats,
                                           std::shared_ptr<Proposer> proposer = nullptr) {
  auto kv = m.create_kv_cache(kv_tokens, DType::kF32);
  EXPECT_TRUE(kv.ok()) << kv.status().to_string();
  if (!kv.ok()) return {};
  EngineConfig ec;
  ec.scheduler.itl_factor = 0;
  ec.scheduler.swap = swap;
  ec.scheduler.swap_blocks = swap ? 32 : 0;
  if (proposer) {  // speculative decoding: drafts verified in multi-token steps, every step
    ec.spec.proposer = std::move(proposer);
    ec.spec.k = 4;
    ec.spec.cost_gate = false;
  }
  Engine engine(m, **kv, m.codec(), ec);
  std::map<RequestId, std::vector<int32_t>> out;
  std::vector<RequestId> ids;
  for (const auto& p : prompts) {
    // The first request alone: its blocks are in the prefix cache when the others arrive.
    if (ids.size() == 1) { EXPECT_TRUE(engine.run_until_idle().ok()); }
    GenerationRequest r;
    r.prompt = p;
    r.sampling = SamplingParams::greedy();
    r.max_tokens = 16;
    r.ignore_eos = true;
    r.on_token = [&out](const TokenEvent& ev) {
      if (ev.token >= 0) out[ev.id].push_back(ev.token);
    };
    auto id = engine.submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    ids.push_back(id.ok() ? *id : -1);
  }
  EXPECT_TRUE(engine.run_until_idle().ok());
  if (stats) *stats = engine.stats();
  std::vector<std::vector<int32_t>> tokens;
  for (RequestId id : ids) tokens.push_back(out[id]);
  return tokens;
}

TEST_P(SplitPlacement, EngineGivesTheOneDeviceTokens) {
  auto alone = load("llama");
  auto split = load("llama", layers(2));
  ASSERT_TRUE(alone && split);
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<int32_t> shared = prompt(40, 7);
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = shared;  // a 40-token shared prefix: prefix-cache hits
    const std::vector<int32_t> tail = prompt(10 + 3 * i, uint32_t(20 + i));
    p.insert(p.end(), tail.begin(), tail.end());
    prompts.push_back(p);
  }
  EngineStats roomy, tight;
  const auto want = generate(*alone, prompts, 1024, false, nullptr);
  EXPECT_EQ(generate(*split, prompts, 1024, false, &roomy), want);
  EXPECT_GT(roomy.sched.cached_tokens, 0) << "no prefix-cache hit";
  // 8 blocks of 16 for four sequences of up to 75 tokens: preemption, by swap to host slots on
  // both devices.
  EXPECT_EQ(generate(*split, prompts, 128, true, &tight), want);
  EXPECT_GT(tight.sched.preemptions, 0);
  EXPECT_GT(tight.kv.swap_ins, 0) << "no sequence came back from the host slots";
  // Speculative decoding (n-gram drafts; greedy verification keeps the tokens), on prompts that
  // repeat themselves, so the proposer finds n-grams to draft from.
  std::vector<std::vector<int32_t>> repeats;
  for (uint32_t i = 0; i < 2; ++i) {
    const std::vector<int32_t> p = prompt(12, 30 + i);
    std::vector<int32_t> q = p;
    q.insert(q.end(), p.begin(), p.end());
    q.insert(q.end(), p.begin(), p.begin() + 4);
    repeats.push_back(q);
  }
  EngineStats spec;
  const auto want_repeats = generate(*alone, repeats, 1024, false, nullptr);
  EXPECT_EQ(generate(*split, repeats, 1024, false, &spec, std::make_shared<NgramProposer>()), want_repeats);
  EXPECT_GT(spec.spec.drafted, 0) << "no draft was verified";
}

// kFitLayers: the whole model on the main device when it fits the budget, else the trailing
// layers that do (the budget here stands for a GPU's free memory).
TEST_P(SplitPlacement, FitsTheLayersTheMainDeviceHolds) {
  auto file = gguf::File::open(path("llama"));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  int64_t layer = 0;  // one layer's weights (the tiny model's layers are all alike)
  for (const auto& t : (*file)->tensors())
    if (t.name.rfind("blk.0.", 0) == 0) layer += int64_t(t.nbytes);
  ASSERT_GT(layer, 0);
  PlacementOptions fit;
  fit.host = host_;
  fit.main_layers = kFitLayers;
  fit.main_budget = size_t(double(layer) * 2.5 / 0.95);  // two and a half layers usable
  auto two = load("llama", fit);
  ASSERT_TRUE(two);
  ASSERT_TRUE(two->placement().split());
  for (int l = 0; l < kLayers; ++l)
    EXPECT_EQ(&two->placement().layer_device(l), l >= kLayers - 2 ? main_.get() : host_.get()) << "layer " << l;
  auto alone = load("llama");
  ASSERT_TRUE(alone);
  expect_same_logits(*alone, *two, "llama fitted to 2.5 layers");
  // Room for the KV of 64 tokens per layer as well: one layer fewer fits.
  fit.fit_kv_tokens = int64_t(double(layer) / (2.0 * 2 * 16 * 2) * 0.75);  // 3/4 of a layer's weights in KV
  auto one = load("llama", fit);
  ASSERT_TRUE(one);
  EXPECT_EQ(&one->placement().layer_device(kLayers - 2), host_.get()) << one->placement().describe(kLayers);
  EXPECT_EQ(&one->placement().layer_device(kLayers - 1), main_.get()) << one->placement().describe(kLayers);
  // A budget that holds everything: one device, no split.
  fit.fit_kv_tokens = 0;
  fit.main_budget = size_t(1) << 40;
  auto all = load("llama", fit);
  ASSERT_TRUE(all);
  EXPECT_FALSE(all->placement().split());
}

TEST(FitMainLayers, TakesTheTrailingLayersThatFit) {
  EXPECT_EQ(fit_main_layers({10, 10, 10}, 5, 5, 40), 4) << "everything fits: no split";
  EXPECT_EQ(fit_main_layers({10, 10, 10}, 5, 5, 39), 3) << "the layers fit, the head and embedding do not";
  EXPECT_EQ(fit_main_layers({10, 10, 10}, 5, 5, 25), 2);
  EXPECT_EQ(fit_main_layers({10, 30, 10}, 5, 5, 25), 1) << "a big layer stops the run";
  EXPECT_EQ(fit_main_layers({10, 10, 10}, 5, 5, 9), 0);
  EXPECT_EQ(fit_main_layers({}, 0, 0, 0), 1) << "nothing to place fits";
}

TEST_P(SplitPlacement, BadPlacementsAreRefusedByName) {
  auto expect_error = [&](const PlacementOptions& p, const std::string& needle) {
    LoadOptions lo;
    lo.placement = p;
    auto m = Model::load(path("llama"), main_, lo);
    ASSERT_FALSE(m.ok()) << needle;
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().to_string();
  };
  expect_error(layers(kLayers + 2), "--gpu-layers " + std::to_string(kLayers + 2) + ": the model has 4 layers");
  expect_error(layers(-5), "--gpu-layers -5");
  PlacementOptions same = layers(1);
  same.host = main_;
  expect_error(same, "is the main device");
  PlacementOptions unknown = layers(1);
  unknown.overrides = {{"exps", "cuda:7"}};
  expect_error(unknown, "unknown device 'cuda:7'");
  PlacementOptions bad_regex = layers(1);
  bad_regex.overrides = {{"blk.(", "cpu"}};
  expect_error(bad_regex, "not a regular expression");
  PlacementOptions no_host;
  no_host.main_layers = 2;
  expect_error(no_host, "need a second device");
}

INSTANTIATE_TEST_SUITE_P(Devices, SplitPlacement, ::testing::Values("cpu", "vulkan", "cuda-sim"), [](const auto& info) {
  std::string name = info.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
});

}  // namespace
}  // namespace tessera

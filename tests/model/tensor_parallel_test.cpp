// Tensor parallelism over MPI on the CPU (docs/multi-device.md). CTest runs this binary as one
// rank, and under mpirun as 2 and 4 ranks on this machine; every rank runs every test. Each rank
// loads a tiny random model twice, whole (no communicator) and as its shard (heads, FFN rows and
// experts' rows split; the row-parallel products all-reduced), and the shard's logits must be the
// whole model's within f32 tolerance: a dense family with a separate head (llama), one with
// QK-norm and a tied head (qwen3), two MoE families (mixtral; qwen2moe with q/k/v biases and a
// shared expert), and a Q8_0 model whose split rows stay whole blocks. A degree that does not
// divide the heads, rows a quantised format cannot split, and a family that cannot split are
// refused by name. TensorParallelDeath runs alone (its own CTest entry): one rank dies before a
// step and the other fails with the collective's name instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "core/comm/communicator.h"
#include "core/registry.h"
#include "core/sched/engine.h"
#include "models/model.h"
#include "tests/model/vulkan_vs_cpu.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> comm = [] {
    auto c = open_communicator();
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? *c : std::shared_ptr<Communicator>(std::make_shared<LocalCommunicator>());
  }();
  return comm;
}

class TensorParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder per rank: each writes its own copy (same seed, same bytes).
    dir_ = testing::process_temp_dir("tessera_tensor_parallel");
    const std::string four = " --dtype f32 --layers 2 --kv-heads 4 --out ";  // 4 heads, 4 KV heads
    for (const char* arch : {"llama", "qwen3", "mixtral", "qwen2moe"})
      ASSERT_EQ(testing::run_make_tiny_model(std::string("--arch ") + arch + four + path(arch)), "");
    ASSERT_EQ(
        testing::run_make_tiny_model("--arch llama --dtype q8_0 --layers 2 --kv-heads 4 --out " + path("llama-q8_0")),
        "");
    // 6 heads over 3 KV heads: no degree of 2 or 4 divides both.
    ASSERT_EQ(testing::run_make_tiny_model(
                  "--arch llama --dtype f32 --layers 2 --dim 96 --heads 6 --kv-heads 3 --out " + path("llama-6-heads")),
              "");
    ASSERT_EQ(testing::run_make_tiny_model("--arch olmoe --dtype f32 --layers 2 --kv-heads 4 --out " + path("olmoe")),
              "");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return dir_ + "/" + name + ".gguf"; }

  void SetUp() override {
    auto cpu = Registry::global().find("cpu");
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    cpu_ = *cpu;
    comm_ = world();
  }
  // |sharded|: every rank runs the same steps itself (tp_every_rank_steps), unless |follow|.
  Result<std::unique_ptr<Model>> load(const std::string& name, bool sharded, bool follow = false,
                                      DType act = DType::kF32) {
    LoadOptions lo;
    lo.activation_dtype = act;
    if (sharded) lo.comm = comm_;
    lo.tp_every_rank_steps = !follow;
    return Model::load(path(name), cpu_, lo);
  }
  void expect_shard_matches(const std::string& name, DType act = DType::kF32, double tol = 1e-4) {
    SCOPED_TRACE(name + " at TP=" + std::to_string(comm_->size()) + ", rank " + std::to_string(comm_->rank()) + ", " +
                 dtype_name(act) + " activations");
    auto whole = load(name, false, false, act);
    auto shard = load(name, true, false, act);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    ASSERT_TRUE(shard.ok()) << shard.status().to_string();
    Model& w = **whole;
    Model& s = **shard;
    const int tp = comm_->size();
    EXPECT_EQ(s.tp_size(), tp);
    EXPECT_EQ(s.rank_config().n_heads * tp, w.config().n_heads);
    EXPECT_EQ(s.rank_config().n_kv_heads * tp, w.config().n_kv_heads);
    // Each rank holds its part of the split weights (the embedding, norms and routers whole).
    for (const Tensor* t : s.weight_tensors()) {
      if (t->name.find("attn_q.weight") != std::string::npos) {
        EXPECT_EQ(t->shape[0] * tp, int64_t(w.config().n_heads) * w.config().head_dim) << t->name;
      }
      if (t->name.find("ffn_down_exps") != std::string::npos) {
        EXPECT_EQ(t->shape[2] * tp, w.config().n_ff_exp) << t->name;
      }
    }
    // The third prompt runs past four KV blocks (72 positions).
    model_test::expect_models_match(w, s, "one rank", "tensor-parallel",
                                    {"The capital of France", "abc abc abc d",
                                     "A longer prompt, so that the context spans several blocks of the KV cache."},
                                    6, DType::kF32, tol, false);
    if (tp > 1) {
      // Two all-reduces per layer and step: after attention and after the FFN.
      EXPECT_GE(s.split_stats().reduces, 2 * w.config().n_layers);
      EXPECT_GT(s.split_stats().reduced_bytes, 0);
    }
  }

  static std::string dir_;
  DevicePtr cpu_;
  std::shared_ptr<Communicator> comm_;
};
std::string TensorParallel::dir_;

TEST_F(TensorParallel, DenseFamiliesGiveTheOneRankLogits) {
  expect_shard_matches("llama");
  expect_shard_matches("qwen3");
}

TEST_F(TensorParallel, MoeFamiliesGiveTheOneRankLogits) {
  expect_shard_matches("mixtral");
  expect_shard_matches("qwen2moe");
}

TEST_F(TensorParallel, HalfActivationsAreSummedInF32) {
  // bf16 activations: the all-reduce widens each rank's part to f32, sums, rounds once.
  expect_shard_matches("llama", DType::kBF16, 3e-2);
}

TEST_F(TensorParallel, QuantisedRowsSplitInWholeBlocks) {
  // attn_output [64, 64] splits its rows at 64 / TP: whole 32-value Q8_0 blocks up to TP = 2.
  if (comm_->size() <= 2) {
    expect_shard_matches("llama-q8_0");
    return;
  }
  auto shard = load("llama-q8_0", true);
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("which its format cannot"), std::string::npos) << shard.status().to_string();
  EXPECT_NE(shard.status().message().find("attn_output"), std::string::npos) << shard.status().to_string();
}

TEST_F(TensorParallel, BadDegreesAndFamiliesAreRefusedByName) {
  auto odd = load("llama-6-heads", true);
  if (comm_->size() == 1) {
    EXPECT_TRUE(odd.ok()) << odd.status().to_string();
  } else {
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("does not divide the model's"), std::string::npos)
        << odd.status().to_string();
  }
  auto olmoe = load("olmoe", true);
  if (comm_->size() == 1) {
    EXPECT_TRUE(olmoe.ok()) << olmoe.status().to_string();
  } else {
    ASSERT_FALSE(olmoe.ok());
    EXPECT_NE(olmoe.status().message().find("QK-norm spans every head"), std::string::npos)
        << olmoe.status().to_string();
  }
}

// The way `mpirun -n N tessera run/serve --tp N` works: rank 0's engine plans every step (prefix
// cache hits and copy-on-write block copies included) and the other ranks follow its plans.
TEST_F(TensorParallel, FollowersRunRankZerosEngine) {
  auto shard = load("llama", true, true);
  ASSERT_TRUE(shard.ok()) << shard.status().to_string();
  auto kv = (*shard)->create_kv_cache(512, DType::kF32);
  ASSERT_TRUE(kv.ok()) << kv.status().to_string();
  if (comm_->rank() != 0) {
    const Status st = (*shard)->follow(**kv);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return;
  }
  auto whole = load("llama", false);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  auto whole_kv = (*whole)->create_kv_cache(512, DType::kF32);
  ASSERT_TRUE(whole_kv.ok());
  // Two prompts sharing a 20-token prefix (the second hits the first's cached blocks), and a
  // third of its own with two completions (forks share its partial last block: copy-on-write
  // block copies), all greedy.
  std::vector<std::vector<int32_t>> prompts(3);
  for (int i = 0; i < 20; ++i) prompts[0].push_back(int32_t((i * 37 + 11) % 250));
  prompts[1] = prompts[0];
  for (int i = 0; i < 5; ++i) prompts[1].push_back(int32_t((i * 13 + 3) % 250));
  for (int i = 0; i < 9; ++i) prompts[2].push_back(int32_t((i * 7 + 101) % 250));
  auto generate = [&](Model& m, KvCache& cache) {
    EngineConfig ec;
    ec.scheduler.itl_factor = 0;
    Engine engine(m, cache, m.codec(), ec);
    std::map<RequestId, std::vector<int32_t>> out;
    std::vector<RequestId> ids;
    for (const auto& p : prompts) {
      if (ids.size() == 1) {  // the first's blocks get cached
        EXPECT_TRUE(engine.run_until_idle().ok());
      }
      GenerationRequest r;
      r.prompt = p;
      r.sampling = SamplingParams::greedy();
      r.max_tokens = 12;
      r.ignore_eos = true;
      if (ids.size() == 2) r.n = 2;
      r.on_token = [&out](const TokenEvent& ev) {
        if (ev.token >= 0) out[ev.id].push_back(ev.token);
      };
      auto id = engine.submit(std::move(r));
      EXPECT_TRUE(id.ok()) << id.status().to_string();
      ids.push_back(id.ok() ? *id : -1);
    }
    EXPECT_TRUE(engine.run_until_idle().ok());
    std::vector<std::vector<int32_t>> tokens;
    for (RequestId id : ids) tokens.push_back(out[id]);
    return tokens;
  };
  const auto want = generate(**whole, **whole_kv);
  const auto got = generate(**shard, **kv);
  EXPECT_TRUE((*shard)->stop_followers().ok());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].size(), i == 2 ? 24u : 12u);  // the third: two completions
    EXPECT_EQ(got[i], want[i]) << "prompt " << i;
  }
}

TEST(TensorParallelDeath, ARankThatDiesMakesTheOthersFailByName) {
  auto comm = world();
  ASSERT_GE(comm->size(), 2) << "run under mpirun -n 2 or more";
  const std::string dir = testing::process_temp_dir("tessera_tensor_parallel_death");
  const std::string file = dir + "/llama.gguf";
  ASSERT_EQ(testing::run_make_tiny_model("--arch llama --dtype f32 --layers 2 --kv-heads 4 --out " + file), "");
  auto cpu = Registry::global().find("cpu");
  ASSERT_TRUE(cpu.ok());
  LoadOptions lo;
  lo.comm = comm;
  lo.tp_every_rank_steps = true;
  auto m = Model::load(file, *cpu, lo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  fs::remove_all(dir);
  if (comm->rank() == comm->size() - 1) std::_Exit(3);  // dies without a word, as a crash would
  auto kv = (*m)->create_kv_cache(64, DType::kF32);
  ASSERT_TRUE(kv.ok());
  StepPlan p;
  p.tokens = {1, 2, 3};
  p.positions = {0, 1, 2};
  p.max_blocks = 1;
  p.block_tables = {*(*kv)->pool().allocate()};
  const int32_t bs = (*kv)->config().block_size;
  for (int32_t i = 0; i < 3; ++i) p.slot_mapping.push_back(p.block_tables[0] * bs + i);
  p.query_start = {0, 3};
  p.seq_lens = {3};
  p.logit_rows = {2};
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = (*m)->forward(p, **kv, &logits);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
  EXPECT_NE(st.message().find("all_reduce"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("another rank died or stalled"), std::string::npos) << st.to_string();
  EXPECT_LT(seconds, 60.0) << "the timeout is TESSERA_COMM_TIMEOUT_S";
  // The model stays failed, at once, and an engine (the server's) refuses new requests with it:
  // the server answers them 503.
  EXPECT_EQ((*m)->health().code(), StatusCode::kUnavailable);
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ((*m)->forward(p, **kv, &logits).code(), StatusCode::kUnavailable);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 1.0);
  Engine engine(**m, **kv, (*m)->codec(), EngineConfig{});
  GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 2;
  auto id = engine.submit(std::move(r));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kUnavailable) << id.status().to_string();
}

}  // namespace
}  // namespace tessera

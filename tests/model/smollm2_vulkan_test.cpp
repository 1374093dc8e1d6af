// SmolLM2-135M-Instruct on the Vulkan device against the CPU backend: 3 prompts x 32 greedy
// tokens, decoded together (one prefill step for the three prompts, then steps of one token per
// sequence, the shapes the engine runs). The Vulkan model is fed the CPU's tokens, so its logits
// are compared on the same contexts at every step and its own greedy choice at a step is the
// argmax of its logits there (so up to the first difference, the two greedy runs are the same).
// Checks, per prompt: the normalised RMS difference of the logits of the 32 steps, and at every
// step where the argmaxes differ, a near-tie: the CPU's margin between the two tokens below
// 2 * tol * rms(row), the rule of tests/model/compare_numpy.py.
// The tolerance is compare_numpy.py's for Q4_1 models, 5e-2 (stated, not fitted): the CPU
// kernels quantise activations to 8 bits per 32-block before their integer dot products, which
// over 30 layers moves the logits far more than the per-op conformance tolerance (NMSE 2e-4),
// while the Vulkan kernels keep f32 activations (model_numpy_reference_vulkan: within ~1e-6 of
// the float64 oracle).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/registry.h"
#include "models/model.h"
#include "tests/model/steady_decode.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

constexpr int kNewTokens = 32;

std::string model_path() {
  const char* dir = std::getenv("TESSERA_MODELS");
  return std::string(dir ? dir : "models-cache") + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// One decoding session of several sequences through Model::forward with its own KV blocks.
class Session {
 public:
  Session(Model& m, const std::vector<std::vector<int32_t>>& prompts, DType kv_dtype) : model_(m), seqs_(prompts) {
    auto kv = m.create_kv_cache(int64_t(prompts.size()) * 128, kv_dtype);
    EXPECT_TRUE(kv.ok()) << kv.status().to_string();
    kv_ = std::move(kv).value();
    const int bs = kv_->config().block_size;
    max_blocks_ = 0;
    for (const auto& p : prompts) max_blocks_ = std::max(max_blocks_, int32_t((p.size() + kNewTokens + bs - 1) / bs));
    blocks_.assign(prompts.size() * size_t(max_blocks_), 0);
    for (auto& b : blocks_) b = *kv_->pool().allocate();
    done_.assign(prompts.size(), 0);
  }

  // Runs every sequence's not yet computed tokens; returns the logits of each sequence's last
  // token, [S][V].
  std::vector<std::vector<float>> step() {
    StepPlan p;
    const int bs = kv_->config().block_size;
    p.max_blocks = max_blocks_;
    p.block_tables = blocks_;
    p.query_start.push_back(0);
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (size_t pos = done_[s]; pos < seqs_[s].size(); ++pos) {
        p.tokens.push_back(seqs_[s][pos]);
        p.positions.push_back(int32_t(pos));
        p.slot_mapping.push_back(blocks_[s * size_t(max_blocks_) + pos / size_t(bs)] * bs + int32_t(pos % size_t(bs)));
      }
      done_[s] = seqs_[s].size();
      p.query_start.push_back(int32_t(p.tokens.size()));
      p.seq_lens.push_back(int32_t(seqs_[s].size()));
      p.logit_rows.push_back(int32_t(p.tokens.size()) - 1);
    }
    std::vector<float> flat;
    const Status st = model_.forward(p, *kv_, &flat);
    EXPECT_TRUE(st.ok()) << st.to_string();
    const size_t V = size_t(model_.vocab_size());
    std::vector<std::vector<float>> rows(seqs_.size());
    for (size_t s = 0; s < seqs_.size() && flat.size() >= (s + 1) * V; ++s)
      rows[s].assign(flat.begin() + long(s * V), flat.begin() + long((s + 1) * V));
    return rows;
  }
  void append(size_t s, int32_t token) { seqs_[s].push_back(token); }

 private:
  Model& model_;
  std::vector<std::vector<int32_t>> seqs_;
  std::unique_ptr<KvCache> kv_;
  std::vector<int32_t> blocks_;
  int32_t max_blocks_ = 0;
  std::vector<size_t> done_;
};

int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// Runs |prompts| for |n_tokens| greedy steps on the CPU and Vulkan loads of |path|, each with a
// |kv_dtype| KV cache, and checks the rules of the file comment.
void expect_vulkan_matches_cpu(const std::string& path, const std::vector<std::string>& texts, int n_tokens,
                               DType kv_dtype = DType::kF16) {
  auto vk_dev = Registry::global().find("vulkan");
  if (!vk_dev.ok()) TESSERA_SKIP_HARDWARE() << "no Vulkan device: " << vk_dev.status().to_string();
  auto cpu = Model::load(path, Registry::global().find("cpu").value());
  auto vk = Model::load(path, *vk_dev);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  ASSERT_TRUE(vk.ok()) << vk.status().to_string();
  const Tokenizer& tok = (*cpu)->tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& t : texts) prompts.push_back(tok.encode(t, false, false));
  constexpr double kTol = 5e-2;  // normalised RMS, compare_numpy.py TOL["q4_1"]
  Session a(**cpu, prompts, kv_dtype), b(**vk, prompts, kv_dtype);
  std::vector<double> err(prompts.size(), 0.0), ref(prompts.size(), 0.0);
  int differences = 0;
  for (int i = 0; i < n_tokens; ++i) {
    const auto want = a.step(), got = b.step();
    ASSERT_EQ(want.size(), prompts.size());
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
      SCOPED_TRACE("prompt " + std::to_string(s) + ", generated token " + std::to_string(i));
      ASSERT_EQ(got[s].size(), want[s].size());
      double row_sq = 0.0;
      for (size_t v = 0; v < want[s].size(); ++v) {
        ASSERT_TRUE(std::isfinite(got[s][v])) << "logit " << v;
        err[s] += (double(got[s][v]) - want[s][v]) * (double(got[s][v]) - want[s][v]);
        row_sq += double(want[s][v]) * want[s][v];
      }
      ref[s] += row_sq;
      const int32_t t_cpu = argmax(want[s]), t_vk = argmax(got[s]);
      if (t_vk != t_cpu) {
        const double margin = double(want[s][size_t(t_cpu)]) - double(want[s][size_t(t_vk)]);
        const double limit = 2.0 * kTol * std::sqrt(row_sq / double(want[s].size()));
        std::printf("[ info ] %s KV, prompt %zu, generated token %d: CPU %d, Vulkan %d, CPU margin %.3g "
                    "(near-tie below %.3g)\n", dtype_name(kv_dtype), s, i, t_cpu, t_vk, margin, limit);
        EXPECT_LT(margin, limit)
            << "Vulkan's greedy token " << t_vk << " differs from the CPU's " << t_cpu << " and is not a near-tie";
        ++differences;
      }
      a.append(s, t_cpu);
      b.append(s, t_cpu);  // the CPU's token: both continue on the same context
    }
  }
  for (size_t s = 0; s < prompts.size(); ++s) {
    const double nrmse = std::sqrt(err[s] / ref[s]);
    std::printf("[ info ] %s KV, prompt %zu: logits nrmse %.3g over %d steps (tolerance %g)\n", dtype_name(kv_dtype), s,
                nrmse, n_tokens, kTol);
    EXPECT_LE(nrmse, kTol) << "prompt " << s;
  }
  std::printf("[ info ] %d of %d greedy tokens differ, each at a near-tie\n", differences, n_tokens * int(prompts.size()));
}

TEST(SmolLM2Vulkan, GreedyTokensAndLogitsMatchTheCpuBackend) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path();
  expect_vulkan_matches_cpu(model_path(),
                            {"The capital of France is",
                             "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
                             "Once upon a time, in a small village by the sea,"},
                            kNewTokens);
}

// The same model requantised by `tessera quantize -t q4_k`: ffn_down (K = 1536) becomes Q4_K and
// every other matrix Q5_0 (rows of 576 are not whole 256-blocks), the tied embedding/output Q8_0,
// so the Vulkan k-quant and 5-bit kernels run a real model. One prompt and 12 tokens keep it short.
TEST(SmolLM2Vulkan, Q4KRequantisedModelMatchesTheCpuBackend) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path();
  if (!Registry::global().find("vulkan").ok()) TESSERA_SKIP_HARDWARE() << "no Vulkan device";
  const std::string out = testing::process_temp_dir("smollm2_q4k") + "/model.q4_k.gguf";
  const char* bin = std::getenv("TESSERA_BIN");
  const std::string cmd = std::string(bin ? bin : "build/bin") + "/tessera quantize -q -t q4_k " + model_path() + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  expect_vulkan_matches_cpu(out, {"The capital of France is"}, 12);
  std::filesystem::remove_all(std::filesystem::path(out).parent_path());
}

// 8-bit KV caches (an f32 scale per token and kv head), with the same rules and tolerance. The
// Vulkan store stage encodes a row byte for byte as quant/ does (tests/vulkan/kv_store_test.cpp),
// so the devices differ by what differs with f16 caches (the CPU's int8 activations) plus the
// codes that this moves across a rounding boundary, which FP8's 3 mantissa bits make large.
// Measured (these prompts, 12 steps): logit NRMSE 0.040/0.044 with fp8_e4m3, 0.023/0.019 with
// int8_pc, 0.025/0.023 with f16 caches; the chat-templated "The capital of France is" over 20
// steps reached 0.087 with fp8_e4m3 (0.035 with f16), so the FP8 margin is thin: a CPU kernel
// change that moves K by int8-activation noise can move these numbers.
TEST(SmolLM2Vulkan, EightBitKvCachesMatchTheCpuBackend) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path();
  for (DType kv : {DType::kFP8_E4M3, DType::kINT8_PC}) {
    SCOPED_TRACE(std::string("kv ") + dtype_name(kv));
    expect_vulkan_matches_cpu(model_path(),
                              {"The capital of France is", "Once upon a time, in a small village by the sea,"}, 12, kv);
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// HAL v2 on Vulkan: a steady decode replays the command buffer recorded for its bucket; a new
// one is recorded (Device::prepare, counted as built) only at the bucket edge (context 33).
TEST(SmolLM2Vulkan, SteadyDecodeReplaysOneCommandBufferPerBucket) {
  auto vk = Registry::global().find("vulkan");
  if (!vk.ok()) TESSERA_SKIP_HARDWARE() << "no Vulkan device: " << vk.status().to_string();
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path();
  auto m = Model::load(model_path(), *vk);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const auto steps = testing::check_steady_decode(**m, 1, 20, 16);
  ASSERT_FALSE(steps.empty());
}

}  // namespace
}  // namespace tessera

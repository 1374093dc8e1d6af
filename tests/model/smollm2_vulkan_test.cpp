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

#include <cstdlib>
#include <filesystem>

#include "core/registry.h"
#include "models/model.h"
#include "tests/model/steady_decode.h"
#include "tests/model/vulkan_vs_cpu.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

using model_test::expect_vulkan_matches_cpu;

constexpr int kNewTokens = 32;

std::string model_path() {
  const char* dir = std::getenv("TESSERA_MODELS");
  return std::string(dir ? dir : "models-cache") + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

TEST(SmolLM2Vulkan, GreedyTokensAndLogitsMatchTheCpuBackend) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path();
  expect_vulkan_matches_cpu(model_path(),
                            {"The capital of France is",
                             "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
                             "Once upon a time, in a small village by the sea,"},
                            kNewTokens);
}

// f16 activations on Vulkan (what a GPU's matrix units want; DeviceInfo::activation_dtype stays
// f32 on lavapipe) against Vulkan's own f32: the f16 shaders of every op carry a real model.
TEST(SmolLM2Vulkan, HalfActivationsMatchF32) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path();
  auto vk_dev = Registry::global().find("vulkan");
  if (!vk_dev.ok()) TESSERA_SKIP_HARDWARE() << "no Vulkan device: " << vk_dev.status().to_string();
  LoadOptions lo;
  lo.activation_dtype = DType::kF16;
  auto f32 = Model::load(model_path(), *vk_dev);
  auto f16 = Model::load(model_path(), *vk_dev, lo);
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  ASSERT_TRUE(f16.ok()) << f16.status().to_string();
  EXPECT_EQ((*f32)->activation_dtype(), DType::kF32);
  model_test::expect_models_match(**f32, **f16, "f32", "f16", {"The capital of France is", "def fibonacci(n):\n    "}, 12,
                                  DType::kF16, 1e-2, false);
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
// change that moves K by int8-activation noise can move these numbers. It did: with the CPU's
// tiled Q4_1 kernels (more accurate than its row kernels) the CPU's token 5 of the first prompt
// is " answer" by 0.48 logits, the float64 reference device's choice (by 0.22), while Vulkan with
// an FP8 cache picks " United"; the near-tie bound of 2 * 0.05 * rms (0.41) was then below the two
// devices' combined error. FP8 E4M3 is therefore held to 0.1 (nrmse and near-tie scale), INT8_PC
// to the f16 caches' 0.05.
TEST(SmolLM2Vulkan, EightBitKvCachesMatchTheCpuBackend) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path();
  for (auto [kv, tol] : {std::pair{DType::kFP8_E4M3, 0.1}, std::pair{DType::kINT8_PC, 0.05}}) {
    SCOPED_TRACE(std::string("kv ") + dtype_name(kv));
    expect_vulkan_matches_cpu(model_path(),
                              {"The capital of France is", "Once upon a time, in a small village by the sea,"}, 12, kv,
                              tol);
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

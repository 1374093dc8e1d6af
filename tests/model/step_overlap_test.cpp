// HAL v2's overlap of host and device work, seen through a counting device decorator: a step's
// submit() queues its inputs (one batched copy from host-pinned staging), its executable and the
// copy of its logits to host-pinned memory, and never waits; collect() waits once. On a Vulkan
// device whose memory the host cannot address that means no upload, download or wait between
// the two. The logits equal those of forward() on the same step.
//
// Decode-batch padding (LoadOptions::pad_decode_batches): a decode batch that shrinks from 7 to 1
// sequences builds one executable per bucket (8, 4, 2, 1) instead of one per size, and every
// sequence's greedy tokens are those of the unpadded run.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "core/sched/engine.h"
#include "models/model.h"
#include "tests/kv/counting_device.h"
#include "tests/kv/test_devices.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

using testing::CountingDevice;

std::vector<std::pair<std::string, DevicePtr>> devices() { return testing::cpu_and_unmapped_vulkan(2); }

// One sequence: a prompt of |n| tokens in block 0.., then a decode of one token at position n.
StepPlan prefill_plan(int n, uint32_t seed) {
  StepPlan p;
  for (int i = 0; i < n; ++i) {
    p.tokens.push_back(int32_t((seed * 2654435761u + uint32_t(i) * 40503u) % 200u) + 3);
    p.positions.push_back(i);
    p.slot_mapping.push_back(i);
  }
  p.query_start = {0, n};
  p.seq_lens = {n};
  p.max_blocks = 2;
  p.block_tables = {0, 1};
  p.logit_rows = {n - 1};
  return p;
}

StepPlan decode_plan(int pos, int32_t token) {
  StepPlan p;
  p.tokens = {token};
  p.positions = {pos};
  p.slot_mapping = {pos};
  p.query_start = {0, 1};
  p.seq_lens = {pos + 1};
  p.max_blocks = 2;
  p.block_tables = {0, 1};
  p.logit_rows = {0};
  return p;
}

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(StepOverlap, SubmitQueuesTheWholeStepAndCollectWaitsOnce) {
  const std::string dir = testing::process_temp_dir("step_overlap");
  const std::string path = dir + "/tiny.gguf";
  ASSERT_EQ(testing::run_make_tiny_model("--arch llama --dtype q8_0 --seed 7 --out " + path), "");
  for (auto& [name, inner] : devices()) {
    SCOPED_TRACE(name);
    auto dev = std::make_shared<CountingDevice>(inner);
    auto m = Model::load(path, dev);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Model& model = **m;
    auto kv = model.create_kv_cache(32);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();

    // The prompt through forward() (submit + collect), then three decode steps split in two.
    std::vector<float> logits;
    ASSERT_TRUE(model.forward(prefill_plan(7, 1), **kv, &logits).ok());
    ASSERT_EQ(logits.size(), size_t(model.vocab_size()));
    int32_t token = argmax(logits);
    std::vector<int32_t> split_tokens;
    for (int step = 0; step < 3; ++step) {
      dev->reset();
      ASSERT_TRUE(model.submit(decode_plan(7 + step, token), **kv).ok());
      EXPECT_EQ(dev->uploads, 0);
      EXPECT_EQ(dev->downloads, 0);
      EXPECT_EQ(dev->waits, 0) << "submit() waited for the device";
      EXPECT_EQ(dev->computes, 1);
      EXPECT_EQ(dev->copies, 2) << "the inputs' copy and the logits' copy";
      ASSERT_TRUE(model.collect(&logits).ok());
      EXPECT_EQ(dev->waits, 1);
      EXPECT_EQ(dev->downloads, 0) << "the logits are read from host-pinned memory";
      ASSERT_EQ(logits.size(), size_t(model.vocab_size()));
      token = argmax(logits);
      split_tokens.push_back(token);
    }

    // The same four steps through forward() on a fresh cache give the same logits.
    auto kv2 = model.create_kv_cache(32);
    ASSERT_TRUE(kv2.ok());
    std::vector<float> ref;
    ASSERT_TRUE(model.forward(prefill_plan(7, 1), **kv2, &ref).ok());
    token = argmax(ref);
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(model.forward(decode_plan(7 + step, token), **kv2, &ref).ok());
      token = argmax(ref);
      EXPECT_EQ(token, split_tokens[size_t(step)]) << "step " << step;
    }
    EXPECT_EQ(ref, logits);

    // One step pending at a time: a second submit() before collect() is refused, and so is a
    // collect() with nothing submitted.
    ASSERT_TRUE(model.submit(decode_plan(10, token), **kv2).ok());
    EXPECT_FALSE(model.submit(decode_plan(11, token), **kv2).ok());
    ASSERT_TRUE(model.collect(&logits).ok());
    EXPECT_FALSE(model.collect(&logits).ok());
  }
}

struct DecodeRun {
  std::map<RequestId, std::vector<int32_t>> tokens;
  int64_t decode_builds = 0;  // executables built by decode-only steps
};

// Seven requests with equal prompts' lengths that stop after 3..9 tokens: the decode batch
// shrinks by one sequence every step from 7 to 1, all within one KV block (one block-table bucket).
DecodeRun run_shrinking_batch(Model& m) {
  DecodeRun out;
  auto kv = m.create_kv_cache(7 * 32);
  EXPECT_TRUE(kv.ok()) << kv.status().to_string();
  if (!kv.ok()) return out;
  const Executor& exec = m.device().executor();
  int64_t built = exec.stats().built;
  EngineConfig ec;
  ec.on_step = [&](const StepRecord& r) {
    if (r.prefill_tokens == 0) out.decode_builds += exec.stats().built - built;
    built = exec.stats().built;
  };
  Engine engine(m, **kv, m.codec(), ec);
  for (int s = 0; s < 7; ++s) {
    GenerationRequest r;
    for (int i = 0; i < 5; ++i) r.prompt.push_back((i * 37 + s * 11 + 5) % 200 + 3);
    r.sampling = SamplingParams::greedy();
    r.max_tokens = 3 + s;
    r.ignore_eos = true;
    r.on_token = [&out](const TokenEvent& e) {
      if (e.token >= 0) out.tokens[e.id].push_back(e.token);
    };
    EXPECT_TRUE(engine.submit(std::move(r)).ok());
  }
  EXPECT_TRUE(engine.run_until_idle().ok());
  return out;
}

TEST(StepOverlap, PaddedDecodeBatchesShareBucketExecutablesAndKeepTokens) {
  const std::string dir = testing::process_temp_dir("step_padding");
  const std::string path = dir + "/tiny.gguf";
  ASSERT_EQ(testing::run_make_tiny_model("--arch llama --dtype q8_0 --seed 11 --out " + path), "");
  for (auto& [name, dev] : devices()) {
    SCOPED_TRACE(name);
    std::map<bool, DecodeRun> runs;
    for (bool pad : {false, true}) {
      LoadOptions opts;
      opts.pad_decode_batches = pad;
      auto m = Model::load(path, dev, opts);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      dev->executor().clear();
      runs[pad] = run_shrinking_batch(**m);
    }
    ASSERT_EQ(runs[false].tokens.size(), 7u);
    EXPECT_EQ(runs[true].tokens, runs[false].tokens);
    EXPECT_EQ(runs[false].decode_builds, 7) << "one executable per batch size 7..1";
    EXPECT_EQ(runs[true].decode_builds, 4) << "one per bucket: 8, 4, 2, 1";
  }
}

}  // namespace
}  // namespace tessera

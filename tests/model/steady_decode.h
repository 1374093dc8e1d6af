// A steady decode through the engine, with the executor's counters read after every step: the
// check behind HAL v2's "one cached executable per bucket". Shared by the CPU and Vulkan tests.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/exec/bucket.h"
#include "core/exec/executor.h"
#include "core/sched/engine.h"
#include "models/model.h"

namespace tessera::testing {

struct StepCounters {
  int32_t prefill_tokens = 0;
  int64_t built = 0;  // the executor's counters after the step
  int64_t reused = 0;
  int64_t graphs = 0;  // Model::step_graphs_built after the step
};

// |batch| identical-length prompts of |prompt_len| tokens decode |new_tokens| tokens together.
// Every decode-only step after the first builds an executable exactly when its block-table
// bucket differs from the previous decode step's (the k-th decode step's sequences hold
// prompt_len + k tokens), and reuses the cached one otherwise; the same holds for the step's
// graph (Model::step_graph). Returns the per-step counters.
inline std::vector<StepCounters> check_steady_decode(Model& m, int batch, int prompt_len, int new_tokens) {
  auto kv = m.create_kv_cache(int64_t(batch) * (prompt_len + new_tokens + 32));
  EXPECT_TRUE(kv.ok()) << kv.status().to_string();
  if (!kv.ok()) return {};
  std::vector<StepCounters> steps;
  const Executor& exec = m.device().executor();
  EngineConfig ec;
  ec.scheduler.max_batch_tokens = 512;
  ec.on_step = [&](const StepRecord& r) {
    steps.push_back({r.prefill_tokens, exec.stats().built, exec.stats().reused, m.step_graphs_built()});
  };
  Engine engine(m, **kv, m.codec(), ec);
  for (int s = 0; s < batch; ++s) {
    GenerationRequest r;
    for (int i = 0; i < prompt_len; ++i) r.prompt.push_back((i * 37 + s * 11 + 5) % 1000 + 100);
    r.sampling = SamplingParams::greedy();
    r.max_tokens = new_tokens;
    r.ignore_eos = true;
    EXPECT_TRUE(engine.submit(std::move(r)).ok());
  }
  EXPECT_TRUE(engine.run_until_idle().ok());
  const int bs = (*kv)->config().block_size;
  auto bucket_of = [&](int k) { return bucket_up((prompt_len + k + bs - 1) / bs); };
  int k = 0;  // decode steps so far
  for (size_t i = 1; i < steps.size(); ++i) {
    if (steps[i].prefill_tokens > 0) continue;
    ++k;
    const bool built = steps[i].built > steps[i - 1].built;
    const bool new_bucket = k == 1 || bucket_of(k) != bucket_of(k - 1);
    EXPECT_EQ(built, new_bucket) << "batch " << batch << ", decode step " << k << " (context " << prompt_len + k
                                 << ", block-table bucket " << bucket_of(k) << "): built " << steps[i].built - steps[i - 1].built;
    if (!new_bucket) {
      EXPECT_EQ(steps[i].reused, steps[i - 1].reused + 1) << "decode step " << k;
    }
    // The graph too is built once per bucket: a steady decode re-submits the kept one.
    EXPECT_EQ(steps[i].graphs > steps[i - 1].graphs, new_bucket) << "batch " << batch << ", decode step " << k;
  }
  EXPECT_EQ(k, new_tokens - 1) << "the first token comes from the prefill step, the rest from decode steps";
  return steps;
}

}  // namespace tessera::testing

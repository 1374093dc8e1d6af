// Shared by the engine tests of the model families (qwen35_engine_test.cpp,
// family_engine_test.cpp): a random prompt, an engine over its own KV cache that records every
// choice's greedy tokens, and a proposer that drafts a known continuation with planted mistakes.
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/sched/engine.h"
#include "core/sched/proposer.h"
#include "models/model.h"

namespace tessera::testing_engine {

// |n| token ids below |vocab| from |seed|.
inline std::vector<int32_t> prompt(int n, uint32_t seed, int32_t vocab = 250) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t(rng() % uint32_t(vocab)));
  return p;
}

struct Runner {
  explicit Runner(Model& m, EngineConfig ec = {}, int64_t kv_tokens = 2048) : model(m) {
    auto made = m.create_kv_cache(kv_tokens, DType::kF32);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    kv = std::move(made).value();
    ec.scheduler.itl_factor = 0;  // plans independent of timing
    engine = std::make_unique<Engine>(m, *kv, m.codec(), ec);
  }
  RequestId submit(const std::vector<int32_t>& p, int max_tokens, int n = 1) {
    GenerationRequest r;
    r.prompt = p;
    r.sampling = SamplingParams::greedy();
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.n = n;
    r.on_token = [this](const TokenEvent& ev) {
      if (ev.token >= 0) out[{ev.id, ev.index}].push_back(ev.token);
      if (ev.metrics) cached[ev.id] = ev.metrics->cached_tokens;
    };
    auto id = engine->submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    return id.ok() ? *id : -1;
  }
  std::vector<int32_t> run(const std::vector<int32_t>& p, int max_tokens) {
    const RequestId id = submit(p, max_tokens);
    EXPECT_TRUE(engine->run_until_idle().ok());
    return out[{id, 0}];
  }
  const std::vector<int32_t>& of(RequestId id, int choice = 0) { return out[{id, choice}]; }
  Model& model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Engine> engine;
  std::map<std::pair<RequestId, int>, std::vector<int32_t>> out;
  std::map<RequestId, int32_t> cached;
};

// Drafts the known greedy continuation, wrong at its second token every third call: some drafts
// are accepted whole, some only in part (the cache, and a recurrent state, roll back and the
// accepted part is computed again).
class ScriptedProposer final : public Proposer {
 public:
  ScriptedProposer(size_t prompt_len, std::vector<int32_t> want, int32_t vocab)
      : prompt_len_(prompt_len), want_(std::move(want)), vocab_(vocab) {}
  void propose(std::span<DraftRequest> batch) override {
    for (DraftRequest& r : batch) {
      r.draft.clear();
      const size_t next = r.tokens.size() - prompt_len_;  // the index in want_ of the token after the pending one
      for (size_t i = next; i < want_.size() && int32_t(r.draft.size()) < r.k; ++i) r.draft.push_back(want_[i]);
      if (++calls_ % 3 == 0 && r.draft.size() > 1) r.draft[1] = (r.draft[1] + 1) % vocab_;
    }
  }
  const char* name() const override { return "scripted"; }

 private:
  size_t prompt_len_;
  std::vector<int32_t> want_;
  int32_t vocab_;
  int64_t calls_ = 0;
};

}  // namespace tessera::testing_engine

// SmolLM2 with speculative decoding: greedy output equals non-speculative greedy output for 200
// tokens on an input-grounded prompt, on the CPU, with n-gram drafts (accepted often there) and
// with a draft model. The draft model is a second load of the same SmolLM2-135M Q4_1 file (the
// only SmolLM2 on disk; a smaller or requantised draft needs the F16 weights), so it checks the
// draft path's correctness and acceptance through a real model, not a speed-up.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "core/registry.h"
#include "core/sched/draft_proposer.h"
#include "core/sched/engine.h"
#include "core/sched/ngram_proposer.h"
#include "models/model.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

std::string model_path() {
  const char* dir = std::getenv("TESSERA_MODELS");
  return std::string(dir ? dir : "models-cache") + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

constexpr const char* kPrompt =
    "Here is a Python function:\n```python\n"
    "def count_words(path):\n"
    "    counts = {}\n"
    "    with open(path) as f:\n"
    "        for line in f:\n"
    "            for word in line.split():\n"
    "                word = word.lower().strip('.,;:!?')\n"
    "                counts[word] = counts.get(word, 0) + 1\n"
    "    return sorted(counts.items(), key=lambda kv: kv[1], reverse=True)\n"
    "```\nThe same function with a docstring and type hints:\n```python\n";

struct GenRun {
  std::vector<int32_t> tokens;
  SpecStats spec;
};

GenRun generate(Model& model, std::shared_ptr<Proposer> proposer) {
  auto kv = model.create_kv_cache(1024);
  EXPECT_TRUE(kv.ok());
  EngineConfig ec;
  ec.spec.proposer = std::move(proposer);
  ec.spec.k = 4;
  ec.spec.cost_gate = false;  // the test checks equality of every speculative step, not speed
  Engine engine(model, **kv, model.codec(), ec);
  GenerationRequest r;
  r.prompt = model.tokenizer().encode(kPrompt, true, false);
  r.sampling = SamplingParams::greedy();
  r.max_tokens = 200;
  r.ignore_eos = true;
  GenRun out;
  r.on_token = [&](const TokenEvent& ev) {
    if (ev.token >= 0) out.tokens.push_back(ev.token);
  };
  EXPECT_TRUE(engine.submit(std::move(r)).ok());
  EXPECT_TRUE(engine.run_until_idle().ok());
  out.spec = engine.stats().spec;
  return out;
}

// The speculative run's tokens equal the plain run's; where not, the first difference is named.
void expect_same_tokens(const GenRun& spec, const GenRun& base) {
  EXPECT_EQ(spec.tokens, base.tokens);
  for (size_t i = 0; i < std::min(spec.tokens.size(), base.tokens.size()); ++i)
    if (spec.tokens[i] != base.tokens[i]) {
      ADD_FAILURE() << "first difference at token " << i << ": " << spec.tokens[i] << " vs " << base.tokens[i];
      break;
    }
}

TEST(SmolLM2Spec, GreedySpeculativeEqualsNonSpeculativeFor200Tokens) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path() << " (run .ci/fetch-model)";
  auto m = Model::load(model_path(), Registry::global().find("cpu").value());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const GenRun base = generate(**m, nullptr);
  const GenRun spec = generate(**m, std::make_shared<NgramProposer>());
  ASSERT_EQ(base.tokens.size(), 200u);
  expect_same_tokens(spec, base);
  EXPECT_GT(spec.spec.accepted, 20) << "too few accepted drafts: the prompt did not exercise multi-token steps";
  std::printf("drafted %lld, accepted %lld (%.1f%%), %.2f per verification\n", static_cast<long long>(spec.spec.drafted),
              static_cast<long long>(spec.spec.accepted), 100.0 * spec.spec.acceptance_rate(), spec.spec.mean_accepted());
}

TEST(SmolLM2Spec, GreedyDraftModelSpeculativeEqualsNonSpeculativeFor200Tokens) {
  if (!std::filesystem::exists(model_path())) TESSERA_SKIP_MISSING() << "SmolLM2 not found at " << model_path() << " (run .ci/fetch-model)";
  auto cpu = Registry::global().find("cpu").value();
  auto m = Model::load(model_path(), cpu);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto d = Model::load(model_path(), cpu);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  auto dkv = (*d)->create_kv_cache(1024);
  ASSERT_TRUE(dkv.ok()) << dkv.status().to_string();
  auto p = DraftModelProposer::create(std::shared_ptr<ModelRunner>(std::move(d).value()), std::move(dkv).value(), (*m)->vocab_size());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  std::shared_ptr<DraftModelProposer> draft = std::move(p).value();
  const GenRun base = generate(**m, nullptr);
  const GenRun spec = generate(**m, draft);
  ASSERT_EQ(base.tokens.size(), 200u);
  expect_same_tokens(spec, base);
  EXPECT_EQ(draft->stats().failures, 0) << draft->last_error().to_string();
  // The same weights draft: nearly every draft is the target's argmax (a row computed in a
  // batch of another shape may round differently, hence not all).
  EXPECT_GT(spec.spec.acceptance_rate(), 0.9);
  std::printf("draft model (the same SmolLM2): drafted %lld, accepted %lld (%.1f%%), %.2f per verification; draft forwards %lld\n",
              static_cast<long long>(spec.spec.drafted), static_cast<long long>(spec.spec.accepted), 100.0 * spec.spec.acceptance_rate(),
              spec.spec.mean_accepted(), static_cast<long long>(draft->stats().forwards));
}

}  // namespace
}  // namespace tessera

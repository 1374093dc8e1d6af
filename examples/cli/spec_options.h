// The speculative decoding flags of `tessera run`, `chat` and `serve` (docs/speculative.md).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "core/sched/engine.h"
#include "models/model.h"

namespace tessera::cli {

struct SpecOptions {
  std::string mode = "off";   // off, ngram, draft
  int k = 4;                  // draft tokens per step
  int max_batch = 8;          // auto-off above this many decoding sequences
  bool no_cost_gate = false;  // keep drafting even when the step cost model says it does not pay
  std::string draft_model;    // --spec draft: the draft GGUF
};

// Adds --spec, --spec-k, --spec-max-batch, --spec-no-cost-gate, --draft-model to |cmd|.
void add_spec_options(CLI::App* cmd, SpecOptions* o);
// What --spec draft needs of the target: the draft loads onto the target's device with the
// target's load options, and gets its own KV cache of as many tokens, of the same dtype.
struct SpecTarget {
  const Model* model = nullptr;
  int64_t kv_tokens = 0;
  DType kv_dtype = DType::kF16;
  LoadOptions load;
};

// The engine's SpecConfig for |o|: no proposer for "off"; "draft" loads --draft-model (a
// vocabulary other than the target's is an InvalidArgument naming both sizes). Call it once per
// process: the draft's weights and KV cache live as long as the returned proposer.
Result<SpecConfig> spec_config(const SpecOptions& o, const SpecTarget& target);

}  // namespace tessera::cli

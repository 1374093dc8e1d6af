// The speculative decoding flags of `tessera run`, `chat` and `serve` (docs/speculative.md).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "core/sched/engine.h"

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
// The engine's SpecConfig for |o|: no proposer for "off". A draft model is not supported yet.
Result<SpecConfig> spec_config(const SpecOptions& o);

}  // namespace tessera::cli

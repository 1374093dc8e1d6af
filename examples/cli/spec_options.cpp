#include "examples/cli/spec_options.h"

#include "core/sched/ngram_proposer.h"

namespace tessera::cli {

void add_spec_options(CLI::App* cmd, SpecOptions* o) {
  cmd->add_option("--spec", o->mode,
                  "speculative decoding: off, ngram (prompt lookup: drafts from the request's own prompt and output) or draft "
                  "(a smaller model, --draft-model)")
      ->capture_default_str()->check(CLI::IsMember({"off", "ngram", "draft"}));
  cmd->add_option("--spec-k", o->k, "draft tokens per step (a request's spec_k overrides it)")->capture_default_str()
      ->check(CLI::Range(1, 32));
  cmd->add_option("--spec-max-batch", o->max_batch, "no drafts in a step with more decoding sequences than this")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_flag("--spec-no-cost-gate", o->no_cost_gate,
                "draft in every step, even when the step cost model predicts fewer tokens per second with drafts");
  cmd->add_option("--draft-model", o->draft_model, "the draft model of --spec draft: a GGUF with the target's vocabulary");
}

Result<SpecConfig> spec_config(const SpecOptions& o) {
  SpecConfig c;
  c.k = o.k;
  c.max_batch = o.max_batch;
  c.cost_gate = !o.no_cost_gate;
  if (o.mode == "ngram") c.proposer = std::make_shared<NgramProposer>();
  if (o.mode == "draft")
    // TODO(#17): the draft-model proposer (its own KV in the same block manager).
    return Unimplemented("--spec draft: the draft-model proposer is not implemented yet; use --spec ngram");
  if (o.mode != "draft" && !o.draft_model.empty()) return InvalidArgument("--draft-model needs --spec draft");
  return c;
}

}  // namespace tessera::cli

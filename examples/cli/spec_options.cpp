#include "examples/cli/spec_options.h"

#include "core/sched/draft_proposer.h"
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

namespace {
Result<std::shared_ptr<Proposer>> load_draft(const std::string& path, const SpecTarget& target) {
  if (!target.model) return InvalidArgument("--spec draft: no target model");
  LoadOptions lo = target.load;
  lo.progress = nullptr;
  auto draft = Model::load(path, target.model->device_ptr(), lo);
  if (!draft.ok()) return draft.status().with_context("--draft-model " + path + ": ");
  // One pool for every layer: the draft's own bookkeeping is a plain KvManager (no window group).
  auto kv = (*draft)->create_kv_cache(target.kv_tokens, target.kv_dtype, 16, /*window_memory=*/false);
  if (!kv.ok()) return kv.status().with_context("--draft-model " + path + ": ");
  DraftModelConfig dc;
  dc.max_batch_tokens = lo.max_batch_tokens;
  dc.max_seqs = lo.max_seqs;
  auto p = DraftModelProposer::create(std::shared_ptr<ModelRunner>(std::move(draft).value()), std::move(kv).value(),
                                      target.model->vocab_size(), dc);
  if (!p.ok()) return p.status().with_context("--draft-model " + path + ": ");
  return std::shared_ptr<Proposer>(std::move(p).value());
}
}  // namespace

Result<SpecConfig> spec_config(const SpecOptions& o, const SpecTarget& target) {
  SpecConfig c;
  c.k = o.k;
  c.max_batch = o.max_batch;
  c.cost_gate = !o.no_cost_gate;
  if (o.mode != "draft" && !o.draft_model.empty()) return InvalidArgument("--draft-model needs --spec draft");
  if (o.mode == "ngram") c.proposer = std::make_shared<NgramProposer>();
  if (o.mode == "draft") {
    if (o.draft_model.empty()) return InvalidArgument("--spec draft needs --draft-model PATH (a GGUF with the target's vocabulary)");
    TS_ASSIGN_OR_RETURN(c.proposer, load_draft(o.draft_model, target));
  }
  return c;
}

}  // namespace tessera::cli

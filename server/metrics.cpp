#include "server/metrics.h"

#include <chrono>
#include <iomanip>
#include <sstream>
#include <utility>

namespace tessera::server {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

namespace {

// A label value in Prometheus text: backslash, quote and newline escaped.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void write_histogram(std::ostringstream& o, const char* name, const char* help, const std::string& labels, const Histogram& h) {
  o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i <= h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    o << name << "_bucket{" << labels << ",le=\"";
    if (i < h.bounds.size()) o << h.bounds[i];
    else o << "+Inf";
    o << "\"} " << cumulative << "\n";
  }
  o << name << "_sum{" << labels << "} " << h.sum << "\n" << name << "_count{" << labels << "} " << h.count << "\n";
}

// vLLM's names (vllm/v1/metrics/loggers.py), which llm-d's endpoint picker and vllm-router's
// dashboards read; docs/scale-out.md maps each to Tessera's own name.
void write_vllm_metrics(std::ostringstream& o, ServerContext& ctx, const EngineStats& s) {
  const std::string labels = "model_name=\"" + label_value(ctx.opts.model_name) + "\"";
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << "\n" << name << '{' << labels << "} " << v
      << "\n";
  };
  metric("vllm:num_requests_running", "gauge", "Sequences holding KV blocks (each of a request's n choices counts).", s.running);
  metric("vllm:num_requests_waiting", "gauge", "Sequences queued for admission.", s.waiting);
  const double total = s.kv_usage.blocks_total > 0 ? double(s.kv_usage.blocks_total) : 1.0;
  metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage: blocks owned by sequences over all blocks (0..1; cached free blocks count as free).",
         double(s.kv_usage.blocks_used) / total);
  o << "# HELP vllm:cache_config_info Information of the KV cache configuration.\n# TYPE vllm:cache_config_info gauge\n"
    << "vllm:cache_config_info{" << labels << ",block_size=\"" << ctx.kv_block_size << "\",num_gpu_blocks=\"" << ctx.kv_blocks
    << "\",num_cpu_blocks=\"0\"} 1\n";
  if (const std::vector<ServedLora> loras = ctx.lora_snapshot();
      !loras.empty() || ctx.opts.allow_runtime_lora_updates) {
    // As vLLM writes it (vllm/v1/metrics/loggers.py): the adapters with sequences running and
    // waiting, comma-separated, as labels; the value is the time of the snapshot.
    auto names = [&](const std::vector<int32_t>& counts) {
      std::string out;
      for (const ServedLora& a : loras)
        if (size_t(a.slot) < counts.size() && counts[size_t(a.slot)] > 0) out += (out.empty() ? "" : ",") + a.name;
      return label_value(out);
    };
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const size_t max_lora = ctx.opts.max_loras > 0 ? size_t(ctx.opts.max_loras) : loras.size();
    o << "# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n"
      << "vllm:lora_requests_info{max_lora=\"" << max_lora << "\",running_lora_adapters=\"" << names(s.lora_running)
      << "\",waiting_lora_adapters=\"" << names(s.lora_waiting) << "\"} " << std::fixed << std::setprecision(3) << now
      << std::defaultfloat << "\n";
  }
  metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in prompt tokens admitted.", double(s.sched.admitted_tokens));
  metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in prompt tokens taken from the cache.", double(s.sched.cached_tokens));
  metric("vllm:num_preemptions_total", "counter", "Sequences preempted for KV space.", double(s.sched.preemptions));
  metric("vllm:generation_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  metric("vllm:spec_decode_num_drafts_total", "counter", "Speculative drafts verified.", double(s.spec.verifications));
  metric("vllm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.", double(s.spec.drafted));
  metric("vllm:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", double(s.spec.accepted));
  std::lock_guard<std::mutex> lock(ctx.mu);
  metric("vllm:prompt_tokens_total", "counter", "Prompt tokens of finished requests.", double(ctx.prompt_tokens));
  write_histogram(o, "vllm:time_to_first_token_seconds", "Time to first token: submit to first token.", labels, ctx.ttft_hist);
  write_histogram(o, "vllm:inter_token_latency_seconds", "Time between consecutive tokens of a choice.", labels, ctx.itl_hist);
  write_histogram(o, "vllm:e2e_request_latency_seconds", "End-to-end request latency: submit to finish.", labels, ctx.e2e_hist);
}

}  // namespace

namespace {

// One Prometheus sample with its HELP and TYPE lines.
struct Metric {
  std::ostringstream& o;
  void operator()(const char* name, const char* type, const char* help, double v) const {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << "\n" << name << ' ' << v << "\n";
  }
};

// The KV pools: the full-attention layers' and (hybrid memory) the sliding-window layers'.
void kv_metrics(const Metric& metric, const EngineStats& s) {
  metric("tessera_kv_blocks_used", "gauge", "KV blocks owned by sequences.", s.kv_usage.blocks_used);
  metric("tessera_kv_blocks_cached", "gauge", "Free KV blocks still holding reusable prefixes.", s.kv_usage.blocks_cached);
  metric("tessera_kv_blocks_total", "gauge", "KV blocks in the pool.", s.kv_usage.blocks_total);
  metric("tessera_kv_slots_waste", "gauge", "Allocated KV slots holding no token.", double(s.kv_usage.slots_waste));
  metric("tessera_kv_slots_allocated", "gauge", "Allocated KV slots.", double(s.kv_usage.slots_allocated));
  // Hybrid memory: what each kind of layer holds (window layers keep only their window's blocks).
  metric("tessera_kv_window_blocks_used", "gauge", "Sliding-window layers' KV blocks owned by sequences.",
         s.window_kv_usage.blocks_used);
  metric("tessera_kv_window_blocks_total", "gauge", "Blocks in the sliding-window layers' pool (0: none).",
         s.window_kv_usage.blocks_total);
  metric("tessera_kv_full_bytes", "gauge", "K/V bytes held by sequences in full-attention layers.", double(s.kv_bytes_full));
  metric("tessera_kv_window_bytes", "gauge", "K/V bytes held by sequences in sliding-window layers.", double(s.kv_bytes_window));
}

// Recurrent layers (hybrid models; all 0 without them): fixed-size state slots and checkpoints.
void state_metrics(const Metric& metric, const EngineStats& s) {
  const StateManagerStats& st = s.state;
  metric("tessera_state_slots_used", "gauge", "Recurrent state slots held by running sequences.", st.pool.slots_used);
  metric("tessera_state_slots_total", "gauge", "Recurrent state slots (the most sequences running at once; 0: none).",
         st.pool.slots_total);
  metric("tessera_state_bytes", "gauge", "Recurrent state bytes held by running sequences.", double(s.state_bytes));
  metric("tessera_state_checkpoints_held", "gauge", "Checkpoint rows holding a state (prefix cache and draft snapshots).",
         st.pool.checkpoints_held);
  metric("tessera_state_checkpoints_total", "gauge", "Checkpoint rows.", st.pool.checkpoints_total);
  metric("tessera_state_checkpoint_hits_total", "counter", "Admissions that restored a checkpointed state.", double(st.pool.hits));
  metric("tessera_state_restored_tokens_total", "counter", "Prompt tokens whose state came from a checkpoint.",
         double(st.restored_tokens));
  metric("tessera_state_checkpoint_evictions_total", "counter", "Checkpoints dropped for room.", double(st.pool.evictions));
  metric("tessera_state_rollbacks_total", "counter", "Speculative steps whose state went back to its snapshot.",
         double(st.rollbacks));
  metric("tessera_state_swapped_out_total", "counter", "Recurrent states copied to host memory (swap preemption).",
         double(st.swapped_out));
}

// Preemption and swapping.
void preemption_metrics(const Metric& metric, const EngineStats& s) {
  metric("tessera_preemptions_total", "counter", "Sequences preempted for KV space.", double(s.sched.preemptions));
  metric("tessera_swap_out_total", "counter", "Preemptions that swapped KV blocks to host memory.", double(s.kv.swap_outs));
  metric("tessera_swap_in_total", "counter", "Swapped sequences brought back.", double(s.kv.swap_ins));
  metric("tessera_kv_blocks_swapped_out_total", "counter", "KV blocks copied to host memory.", double(s.kv.blocks_swapped_out));
  metric("tessera_kv_blocks_swapped_in_total", "counter", "KV blocks copied back from host memory.", double(s.kv.blocks_swapped_in));
}

// Speculative decoding and the proposer's own counters.
void spec_metrics(const Metric& metric, const EngineStats& s) {
  metric("tessera_spec_steps_total", "counter", "Engine steps that verified speculative drafts.", double(s.spec.steps));
  metric("tessera_spec_steps_off_batch_total", "counter", "Steps whose decodes did not speculate: too many of them.",
         double(s.spec.steps_off_batch));
  metric("tessera_spec_steps_off_cost_total", "counter", "Steps whose decodes did not speculate: the step cost model said it would not pay.",
         double(s.spec.steps_off_cost));
  metric("tessera_spec_draft_tokens_total", "counter", "Draft tokens scored by the target.", double(s.spec.drafted));
  metric("tessera_spec_accepted_tokens_total", "counter", "Draft tokens accepted.", double(s.spec.accepted));
  metric("tessera_spec_acceptance_rate", "gauge", "Accepted over drafted tokens.", s.spec.acceptance_rate());
  metric("tessera_spec_mean_accepted_length", "gauge", "Accepted draft tokens per verification.", s.spec.mean_accepted());
  metric("tessera_spec_proposals_total", "counter", "Proposer calls.", double(s.spec.proposals));
  metric("tessera_spec_propose_seconds_total", "counter", "Host time in the proposer (a draft model's forwards included).",
         s.spec.propose_ms / 1e3);
  const ProposerStats& ps = s.spec.proposer;
  metric("tessera_spec_draft_model_forwards_total", "counter", "Draft model forwards (0 without a draft model).", double(ps.forwards));
  metric("tessera_spec_draft_model_catch_up_tokens_total", "counter", "Context tokens fed to the draft model.",
         double(ps.catch_up_tokens));
  metric("tessera_spec_draft_model_truncations_total", "counter", "Draft model calls that dropped K/V past a rejection.",
         double(ps.truncations));
  metric("tessera_spec_draft_model_out_of_blocks_total", "counter", "Drafts skipped because the draft model's KV pool was full.",
         double(ps.out_of_blocks));
  metric("tessera_spec_draft_model_failures_total", "counter", "Draft model calls whose forward failed.", double(ps.failures));
}

// The latest step and the fitted step cost model.
void step_metrics(const Metric& metric, std::ostringstream& o, const EngineStats& s) {
  metric("tessera_step_tokens", "gauge", "Tokens in the latest engine step.", s.sched.step.last_step_tokens);
  metric("tessera_step_prefill_tokens", "gauge", "Prefill chunk tokens in the latest engine step.", s.sched.step.last_prefill_tokens);
  metric("tessera_step_seconds", "gauge", "Measured time of the latest engine step.", s.sched.step.last_step_ms / 1e3);
  metric("tessera_step_predicted_seconds", "gauge", "Step cost model's prediction for the latest step.", s.sched.step.last_predicted_ms / 1e3);
  metric("tessera_step_limit_seconds", "gauge", "Step time limit of the latest step's prefill chunks (0: none).", s.sched.step.last_limit_ms / 1e3);
  metric("tessera_prefill_chunks_cost_limited_total", "counter", "Prefill chunks the step cost limit cut below the token budget.",
         double(s.sched.step.cost_limited_chunks));
  o << "# HELP tessera_step_cost_seconds Fitted step cost coefficients (seconds per step, token, sampled row, query-key pair).\n"
       "# TYPE tessera_step_cost_seconds gauge\n";
  const std::pair<const char*, double> terms[] = {{"step", s.sched.step.cost.c0_ms}, {"token", s.sched.step.cost.token_ms},
                                                  {"logit", s.sched.step.cost.logit_ms}, {"pair", s.sched.step.cost.pair_ms}};
  for (const auto& [term, ms] : terms) o << "tessera_step_cost_seconds{term=\"" << term << "\"} " << ms / 1e3 << "\n";
}

}  // namespace

std::string prometheus(ServerContext& ctx) {
  const EngineStats s = ctx.engine->stats();
  std::ostringstream o;
  o.precision(15);  // counters stay exact far past the default 6 digits
  const Metric metric{o};
  metric("tessera_requests_running", "gauge", "Sequences holding KV blocks.", s.running);
  metric("tessera_requests_waiting", "gauge", "Sequences queued for admission (queue depth).", s.waiting);
  metric("tessera_http_requests_in_flight", "gauge", "Generation requests admitted and not finished.",
         ctx.in_flight.load());
  kv_metrics(metric, s);
  state_metrics(metric, s);
  preemption_metrics(metric, s);
  metric("tessera_executables_built_total", "counter",
         "Step graphs prepared (validated, planned, recorded): a new shape bucket, or one evicted from the cache.",
         double(s.exec.built));
  metric("tessera_executables_reused_total", "counter", "Steps that re-submitted a cached executable.",
         double(s.exec.reused));
  metric("tessera_steps_total", "counter", "Engine steps run.", double(s.sched.steps));
  metric("tessera_grammar_masks_total", "counter", "Grammar masks computed (one per token sampled under a grammar).",
         double(s.grammar.masks));
  metric("tessera_grammar_mask_seconds_total", "counter", "Host time computing grammar masks.",
         s.grammar.mask_ms_sum / 1e3);
  metric("tessera_grammar_mask_seconds_p99", "gauge",
         "99th percentile of one grammar mask's host time (10 us buckets).", s.grammar.mask_ms_p99 / 1e3);
  metric("tessera_grammar_mask_seconds_max", "gauge", "The slowest grammar mask.", s.grammar.mask_ms_max / 1e3);
  metric("tessera_grammar_dead_ends_total", "counter", "Requests ended because their grammar allowed no next token.",
         double(s.grammar.dead_ends));
  metric("tessera_prompt_tokens_total", "counter", "Prompt tokens admitted.", double(s.sched.admitted_tokens));
  metric("tessera_prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache.",
         double(s.sched.cached_tokens));
  metric("tessera_prefix_cache_hit_rate", "gauge", "Cached over admitted prompt tokens.", s.prefix_hit_rate());
  metric("tessera_generation_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  spec_metrics(metric, s);
  step_metrics(metric, o, s);
  {
    std::lock_guard<std::mutex> lock(ctx.mu);
    o << "# HELP tessera_request_finished_total Finished choices by reason.\n# TYPE tessera_request_finished_total counter\n";
    for (const auto& [reason, n] : ctx.finished) o << "tessera_request_finished_total{reason=\"" << reason << "\"} " << n << "\n";
    o << "# HELP tessera_http_errors_total Error responses by status.\n# TYPE tessera_http_errors_total counter\n";
    for (const auto& [code, n] : ctx.http_errors) o << "tessera_http_errors_total{code=\"" << code << "\"} " << n << "\n";
    auto summary = [&](const char* name, const char* help, double sum, int64_t count) {
      o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " summary\n"
        << name << "_sum " << sum << "\n" << name << "_count " << count << "\n";
    };
    summary("tessera_time_to_first_token_seconds", "Submit to first token.", ctx.ttft_sum_s, ctx.ttft_count);
    summary("tessera_time_per_output_token_seconds", "Mean time per output token after the first.", ctx.tpot_sum_s, ctx.tpot_count);
    summary("tessera_e2e_request_latency_seconds", "Submit to finish.", ctx.e2e_sum_s, ctx.e2e_count);
  }
  write_vllm_metrics(o, ctx, s);
  return o.str();
}

}  // namespace tessera::server

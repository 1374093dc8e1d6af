// `tessera run` (one prompt -> streamed completion) and `tessera chat` (interactive).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/sched/draft_proposer.h"
#include "examples/cli/commands.h"
#include "examples/cli/common.h"
#include "grammar/compiler.h"
#include "examples/cli/spec_options.h"

namespace tessera::cli {

namespace {

struct GenerateOptions {
  ModelOptions model;
  SamplingParams sampling;
  std::string prompt;
  std::string system;
  int max_tokens = 256;
  bool ignore_eos = false;
  bool raw = false;      // no chat template
  bool stats = false;
  bool ids = false;      // the generated token ids to stderr (comparisons that text cannot carry)
  // Structured output (at most one): any JSON object, a JSON Schema file, a GBNF/EBNF file, a regex.
  bool json = false;
  std::string json_schema_file, grammar_file, regex;
  SpecOptions spec;
};

// The grammar |o| asks for (null when none), compiled for |model|'s vocabulary.
Result<std::shared_ptr<const Grammar>> request_grammar(const Model& model, const GenerateOptions& o) {
  GrammarSpec spec;
  int asked = 0;
  auto read = [](const std::string& path, std::string* out) -> Status {
    std::ifstream f(path, std::ios::binary);
    if (!f) return InvalidArgument(path + ": cannot open");
    std::stringstream ss;
    ss << f.rdbuf();
    *out = ss.str();
    return OkStatus();
  };
  if (o.json) ++asked, spec.kind = GrammarSpec::Kind::kJson;
  if (!o.json_schema_file.empty()) {
    ++asked, spec.kind = GrammarSpec::Kind::kJsonSchema;
    TS_RETURN_IF_ERROR(read(o.json_schema_file, &spec.source));
  }
  if (!o.grammar_file.empty()) {
    ++asked, spec.kind = GrammarSpec::Kind::kEbnf;
    TS_RETURN_IF_ERROR(read(o.grammar_file, &spec.source));
  }
  if (!o.regex.empty()) ++asked, spec.kind = GrammarSpec::Kind::kRegex, spec.source = o.regex;
  if (asked == 0) return std::shared_ptr<const Grammar>();
  if (asked > 1) return InvalidArgument("--json, --json-schema, --grammar and --regex: give at most one");
  TS_ASSIGN_OR_RETURN(auto compiler, GrammarCompiler::create(grammar_vocab(model.tokenizer(), model.vocab_size())));
  return compiler->compile(spec);
}

// The target facts --spec draft needs (load_model's defaults for the draft too).
// Hybrid memory: what each kind of layer held at its peak (full-attention layers keep every
// token; sliding-window layers only their window's blocks).
void print_kv_memory(const EngineStats& st, const KvCache& kv) {
  const KvCacheConfig& c = kv.config();
  const int n_window = kv.has_window() ? kv.n_window_layers() : 0;
  // Bytes of one block over each group's layers (their K/V shapes may differ: Gemma 4).
  const double mib = 1.0 / (1 << 20), full_block = double(kv.group_block_bytes(false));
  const double window_block = double(kv.group_block_bytes(true));
  const int n_full = kv.n_kv_layers() - n_window;
  std::fprintf(stderr,
               "stats: KV held at the last step (peak): %d full-attention layers %d (%d) blocks, %.2f (%.2f) MiB",
               n_full, st.kv_blocks_last_step, st.kv_blocks_peak, st.kv_blocks_last_step * full_block * mib,
               st.kv_blocks_peak * full_block * mib);
  if (n_window > 0)
    std::fprintf(stderr, "; %d window layers %d (%d) blocks, %.2f (%.2f) MiB (window %d tokens = %.1f blocks of %d)",
                 n_window, st.kv_window_blocks_last_step, st.kv_window_blocks_peak,
                 st.kv_window_blocks_last_step * window_block * mib, st.kv_window_blocks_peak * window_block * mib,
                 c.window, double(c.window) / c.block_size, c.block_size);
  // Recurrent layers hold one fixed-size state per sequence, whatever its length.
  if (const RecurrentStatePool* states = kv.states())
    std::fprintf(stderr, "; %zu recurrent layers %.2f MiB of state per sequence", states->config().layers.size(),
                 double(states->bytes_per_slot()) * mib);
  std::fprintf(stderr, "\n");
}

// A model placed across devices: where its weights are and what crossed between them per step.
void print_placement(const Model& model, int64_t steps) {
  const SplitStats& ss = model.split_stats();
  const double n = double(std::max<int64_t>(1, steps));
  if (model.tp_size() > 1)
    std::fprintf(
        stderr,
        "stats: tensor-parallel over %d ranks: %d of %d heads here; %.1f all-reduces per step (%.1f KB, %.2f ms "
        "per step in the communicator, the other ranks' lag included)\n",
        model.tp_size(), model.rank_config().n_heads, model.config().n_heads, double(ss.reduces) / n,
        double(ss.reduced_bytes) / 1e3 / n, ss.reduce_seconds * 1e3 / n);
  if (!model.placement().split()) return;
  std::fprintf(stderr, "stats: placed %s\n", placement_summary(model).c_str());
  std::fprintf(
      stderr,
      "stats: %d segments per step; %lld copies into segments (%.1f KB and %.2f ms per step), %.2f ms per step "
      "waiting for the other device\n",
      ss.segments, static_cast<long long>(ss.copies), double(ss.copied_bytes) / 1e3 / n, ss.copy_seconds * 1e3 / n,
      ss.wait_seconds * 1e3 / n);
}

SpecTarget spec_target(const Model& model, const ModelOptions& mo, DType kv_dtype) {
  SpecTarget t;
  t.model = &model;
  t.kv_tokens = mo.ctx;
  t.kv_dtype = kv_dtype;
  t.load = load_options(mo);
  return t;
}

// Streams one completion of |text| to stdout; returns the generated text.
Result<std::string> generate(Model& model, KvCache& kv, const SpecConfig& spec, const std::string& text, const GenerateOptions& o,
                             bool stats) {
  const Tokenizer& tok = model.tokenizer();
  GenerationRequest req;
  req.prompt = tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
  req.sampling = o.sampling;
  req.max_tokens = o.max_tokens;
  req.ignore_eos = o.ignore_eos;
  TS_ASSIGN_OR_RETURN(req.grammar, request_grammar(model, o));
  std::string out;
  FinishReason finish = FinishReason::kNone;
  RequestMetrics metrics;
  std::string error;
  std::string ids;
  req.on_token = [&](const TokenEvent& ev) {
    if (ev.token >= 0) ids += (ids.empty() ? "" : ",") + std::to_string(ev.token);
    std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
    std::fflush(stdout);
    out += ev.text;
    if (ev.metrics) metrics = *ev.metrics;
    if (ev.finish == FinishReason::kError) error = ev.error;
    if (ev.finish != FinishReason::kNone) finish = ev.finish;
  };
  model.set_collect_expert_stats(stats);
  model.reset_expert_stats();
  EngineConfig ec;
  ec.spec = spec;
  Engine engine(model, kv, model.codec(), ec);
  TS_ASSIGN_OR_RETURN(RequestId id, engine.submit(std::move(req)));
  (void)id;
  TS_RETURN_IF_ERROR(engine.run_until_idle());
  if (!error.empty()) return Internal(error);
  std::printf("\n");
  std::fflush(stdout);
  if (o.ids) std::fprintf(stderr, "ids: %s\n", ids.c_str());
  if (finish == FinishReason::kGrammarDeadEnd) std::fprintf(stderr, "finish: grammar_dead_end (no token could continue)\n");
  if (stats) {
    const double prefill_tps = metrics.ttft_ms > 0 ? 1000.0 * metrics.prompt_tokens / metrics.ttft_ms : 0;
    const double decode_tps = metrics.tpot_ms > 0 ? 1000.0 / metrics.tpot_ms : 0;
    std::fprintf(stderr, "stats: prompt %d tokens, TTFT %.1f ms (%.1f tok/s prefill); %d tokens generated, %.1f ms/token (%.1f tok/s decode)\n",
                 metrics.prompt_tokens, metrics.ttft_ms, prefill_tps, metrics.generated_tokens, metrics.tpot_ms, decode_tps);
    if (const std::string t = thread_report(model.device()); !t.empty())
      std::fprintf(stderr, "stats: cpu %s\n", t.c_str());
    print_placement(model, engine.stats().sched.steps);
    const ExecutorStats es = engine.stats().exec;
    std::fprintf(stderr, "stats: executables built %lld, reused %lld; step graphs built %lld (one per step shape bucket; a steady decode reuses)\n",
                 static_cast<long long>(es.built), static_cast<long long>(es.reused), static_cast<long long>(model.step_graphs_built()));
    const GrammarStats gs = engine.stats().grammar;
    if (gs.masks > 0)
      std::fprintf(stderr, "stats: grammar masks %lld, %.3f ms mean, p50 %.2f ms, p99 %.2f ms, max %.3f ms per token (host)\n",
                   static_cast<long long>(gs.masks), gs.mask_ms_sum / double(gs.masks), gs.mask_ms_p50, gs.mask_ms_p99,
                   gs.mask_ms_max);
    const SpecStats sp = engine.stats().spec;
    if (ec.spec.proposer)
      std::fprintf(stderr, "stats: speculative (%s, k %d): %lld steps with drafts, %lld drafted, %lld accepted (%.1f%%), %.2f accepted per "
                   "verification; steps off: %lld batch, %lld cost\n",
                   ec.spec.proposer->name(), ec.spec.k, static_cast<long long>(sp.steps), static_cast<long long>(sp.drafted),
                   static_cast<long long>(sp.accepted), 100.0 * sp.acceptance_rate(), sp.mean_accepted(),
                   static_cast<long long>(sp.steps_off_batch), static_cast<long long>(sp.steps_off_cost));
    if (const auto* dp = dynamic_cast<const DraftModelProposer*>(ec.spec.proposer.get())) {
      const ProposerStats ds = dp->stats();
      std::fprintf(stderr, "stats: draft model: %lld forwards, %lld context tokens caught up, %lld truncations after rejections, "
                   "%lld drafts skipped for want of draft KV, %lld failed calls%s%s\n",
                   static_cast<long long>(ds.forwards), static_cast<long long>(ds.catch_up_tokens),
                   static_cast<long long>(ds.truncations), static_cast<long long>(ds.out_of_blocks),
                   static_cast<long long>(ds.failures), ds.failures ? ": " : "",
                   ds.failures ? dp->last_error().to_string().c_str() : "");
    }
    if (model.config().is_moe()) std::fputs(expert_stats_table(model.expert_stats()).c_str(), stderr);
    print_kv_memory(engine.stats(), kv);
  }
  return out;
}


// run and chat generate one sequence at a time: the step buffer and the sliding-window layers'
// KV pool (hybrid memory) are sized for one.
LoadOptions one_sequence() {
  LoadOptions lo;
  lo.max_seqs = 1;
  return lo;
}

void run_command(const GenerateOptions& o) {
  if (o.model.tp > 1 && o.spec.mode != "off")
    return fail(
        Unimplemented("--spec with --tp: speculative decoding on a tensor-parallel model is not supported yet"));
  auto model = load_model(o.model, one_sequence());
  if (!model) return;
  const auto kvt = dtype_from_name(o.model.kv_dtype);
  if (!kvt) return fail(InvalidArgument("unknown --kv-dtype '" + o.model.kv_dtype + "'"));
  auto kv = model->create_kv_cache(o.model.ctx, *kvt, 16, !o.model.swa_full);
  if (!kv.ok()) return fail(kv.status());
  if (model->tp_rank() > 0) {  // a tensor-parallel follower: rank 0's steps until it is done
    if (Status s = model->follow(**kv); !s.ok()) fail(s);
    return;
  }
  auto spec = spec_config(o.spec, spec_target(*model, o.model, *kvt));
  if (!spec.ok()) return fail(spec.status());
  std::string text = o.prompt;
  if (!o.raw) {
    std::vector<std::pair<std::string, std::string>> turns;
    if (!o.system.empty()) turns.push_back({"system", o.system});
    turns.push_back({"user", o.prompt});
    auto r = apply_chat_template(*model, turns, true);
    if (!r.ok()) return fail(r.status());
    text = *r;
  }
  auto r = generate(*model, **kv, *spec, text, o, o.stats);
  if (!r.ok()) fail(r.status());
  if (Status s = model->stop_followers(); !s.ok()) fail(s);
}

void chat_command(const GenerateOptions& o) {
  auto model = load_model(o.model, one_sequence());
  if (!model) return;
  const auto kvt = dtype_from_name(o.model.kv_dtype);
  if (!kvt) return fail(InvalidArgument("unknown --kv-dtype '" + o.model.kv_dtype + "'"));
  auto kv = model->create_kv_cache(o.model.ctx, *kvt, 16, !o.model.swa_full);
  if (!kv.ok()) return fail(kv.status());
  // Once for the whole chat: a draft model loads here, not per turn.
  auto spec = spec_config(o.spec, spec_target(*model, o.model, *kvt));
  if (!spec.ok()) return fail(spec.status());
  std::vector<std::pair<std::string, std::string>> turns;
  if (!o.system.empty()) turns.push_back({"system", o.system});
  std::fprintf(stderr, "chat: type a message and press enter; an empty line or Ctrl-D ends.\n");
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    turns.push_back({"user", line});
    auto text = apply_chat_template(*model, turns, true);
    if (!text.ok()) return fail(text.status());
    auto reply = generate(*model, **kv, *spec, *text, o, o.stats);
    if (!reply.ok()) return fail(reply.status());
    turns.push_back({"assistant", *reply});
  }
}

void add_generate_options(CLI::App* cmd, GenerateOptions* o) {
  add_model_options(cmd, &o->model);
  add_thread_options(cmd, &o->model.threads, &o->model.threads_batch);
  add_sampling_options(cmd, &o->sampling);
  cmd->add_option("-n,--max-tokens", o->max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("-s,--system", o->system, "system prompt");
  cmd->add_flag("--json", o->json, "structured output: the reply is one JSON object");
  cmd->add_option("--json-schema", o->json_schema_file, "structured output: the reply follows the JSON Schema in FILE")
      ->check(CLI::ExistingFile);
  cmd->add_option("--grammar", o->grammar_file, "structured output: the reply follows the GBNF/EBNF grammar in FILE (rule 'root')")
      ->check(CLI::ExistingFile);
  cmd->add_option("--regex", o->regex, "structured output: the reply matches this regular expression");
  cmd->add_flag("--stats", o->stats, "print prefill and decode speed, the CPU threads used (and, for MoE models, the expert load per layer; with "
                "--spec, the drafts' acceptance; with a grammar, its mask time) to stderr");
  add_spec_options(cmd, &o->spec);
}

}  // namespace

void add_generate_commands(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  auto* run = app.add_subcommand("run", "Generate a completion for one prompt, streamed to stdout");
  add_generate_options(run, o.get());
  run->add_option("-p,--prompt", o->prompt, "the prompt")->required();
  run->add_flag("--raw", o->raw, "use the prompt as is, without the model's chat template");
  run->add_flag("--ignore-eos", o->ignore_eos, "generate --max-tokens tokens, past the end-of-generation token (for benchmarks)");
  add_tp_option(run, &o->model.tp);
  run->add_flag("--ids", o->ids, "print the generated token ids to stderr (\"ids: 12,7,...\"), for comparisons");
  run->callback([o] { run_command(*o); });

  auto c = std::make_shared<GenerateOptions>();
  auto* chat = app.add_subcommand("chat", "Chat interactively, with the model's own chat template");
  add_generate_options(chat, c.get());
  chat->callback([c] { chat_command(*c); });
}

}  // namespace tessera::cli

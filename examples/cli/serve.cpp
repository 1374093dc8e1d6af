// `tessera serve`: loads the model, builds the engine from the command line's KV cache and
// scheduler options, and runs the OpenAI-compatible server of server/ over it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "core/registry.h"
#include "core/sched/scheduler.h"
#include "examples/cli/commands.h"
#include "examples/cli/common.h"
#include "examples/cli/spec_options.h"
#include "server/kv_events.h"
#include "server/server.h"

namespace tessera::cli {

namespace {

struct ServeCommandOptions {
  std::string model;
  std::string device = "auto";
  int ctx = 16384;  // KV cache capacity in tokens (shared by every request)
  std::string kv_dtype = "f16";
  std::string act_dtype = "auto";
  bool no_prefix_caching = false;
  bool swa_full = false;  // sliding-window layers keep every token (no window pool)
  std::string preemption = "swap";  // swap keeps progress; recompute re-prefills (and thrashes a short pool)
  int swap_space = 0;  // host tokens for swapped-out KV (with --preemption swap); 0: as many as -c
  bool wall_clock_cost = false;  // fit the step cost on wall time even on a CPU device
  std::string pooling;  // /v1/embeddings of a decoder: "last" or "mean" ("": the model's own)
  // The scheduler flags bind to these fields, so their defaults are SchedulerConfig's own.
  SchedulerConfig scheduler;
  std::string step_log;  // CSV trace of every engine step ("" none)
  server::ServeOptions serve;
  server::KvEventsOptions kv_events;  // endpoint "" : off
  SpecOptions spec;
  int load_delay_ms = 0;  // a test hook: stay in the loading state this long after binding
  int threads = 0, threads_batch = 0;  // CPU threads (0: the default)
  std::vector<std::string> loras;      // --lora NAME=PATH
  PlacementFlags placement;            // --gpu-layers, --cpu-moe, --override-tensor
  int tp = 1;                          // --tp N: tensor parallelism over N ranks (mpirun -n N)
};

void serve_fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  set_exit_code(code);
}

// --kv-events: a publisher fed by |kv|'s block pool (null without the flag).
Result<std::unique_ptr<server::KvEventPublisher>> start_kv_events(const ServeCommandOptions& o, Model& model,
                                                                  KvCache& kv) {
  if (o.kv_events.endpoint.empty()) return std::unique_ptr<server::KvEventPublisher>();
  server::KvEventsOptions ko = o.kv_events;
  ko.block_size = kv.config().block_size;
  // Called on the engine thread, from the block pool, as a step stores blocks.
  ko.lora_name = [m = &model](int32_t lora_id) { return m->lora_name_of(lora_id); };
  TS_ASSIGN_OR_RETURN(auto pub, server::KvEventPublisher::start(ko));
  kv.pool().set_event_sink(pub.get());
  std::fprintf(stderr, "serve: KV events on %s%s%s\n", ko.endpoint.c_str(),
               ko.replay_endpoint.empty() ? "" : ", replay on ", ko.replay_endpoint.c_str());
  return pub;
}

using StepLog = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;
// --step-log FILE: a CSV line per engine step through |ec|'s on_step.
Status open_step_log(const std::string& path, StepLog* log, EngineConfig* ec) {
  if (path.empty()) return OkStatus();
  log->reset(std::fopen(path.c_str(), "w"));
  if (!*log) return InvalidArgument("--step-log: cannot write '" + path + "'");
  std::fprintf(
      log->get(),
      "step,seqs,tokens,prefill_tokens,limit_ms,predicted_ms,measured_ms,wall_ms,c0_ms,token_ms,logit_ms,pair_ms\n");
  ec->on_step = [f = log->get()](const StepRecord& r) {
    std::fprintf(f, "%lld,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.4g,%.4g,%.4g,%.4g\n", static_cast<long long>(r.step), r.seqs,
                 r.tokens, r.prefill_tokens, r.limit_ms, r.predicted_ms, r.measured_ms, r.wall_ms, r.cost.c0_ms,
                 r.cost.token_ms, r.cost.logit_ms, r.cost.pair_ms);
  };
  return OkStatus();
}

// The model as every rank loads it (rank 0 and, under --tp, the followers alike), with its KV cache.
Status load_served_model(const ServeCommandOptions& o, const DevicePtr& dev, DType kvt,
                         std::shared_ptr<Communicator> comm, std::unique_ptr<Model>* model,
                         std::unique_ptr<KvCache>* kv, LoadOptions* used) {
  LoadOptions lo;
  lo.max_batch_tokens = o.scheduler.max_batch_tokens;
  lo.max_seqs = o.scheduler.max_seqs;
  if (o.act_dtype != "auto") lo.activation_dtype = dtype_from_name(o.act_dtype);
  TS_ASSIGN_OR_RETURN(lo.placement, placement_options(o.placement, dev, o.threads, o.threads_batch, false, o.ctx));
  lo.comm = std::move(comm);
  TS_ASSIGN_OR_RETURN(*model, Model::load(o.model, dev, lo));
  if (!o.pooling.empty()) {
    const Pooling p = o.pooling == "last" ? Pooling::kLast : o.pooling == "cls" ? Pooling::kCls : Pooling::kMean;
    TS_RETURN_IF_ERROR((*model)->set_pooling(p));
  }
  TS_ASSIGN_OR_RETURN(*kv, (*model)->create_kv_cache(o.ctx, kvt, 16, !o.swa_full));
  *used = lo;
  return OkStatus();
}

// A tensor-parallel rank other than 0: no server, rank 0's steps until it stops.
void serve_follower(const ServeCommandOptions& o, const DevicePtr& dev, DType kvt, std::shared_ptr<Communicator> comm) {
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> kv;
  LoadOptions lo;
  Status s = load_served_model(o, dev, kvt, std::move(comm), &model, &kv, &lo);
  if (s.ok()) s = model->follow(*kv);
  if (!s.ok()) serve_fail(s.to_string());
}

void serve_command(const ServeCommandOptions& opts) {
  server::SignalWatcher signals;  // before any thread starts, so they all inherit the mask
  auto comm = tensor_parallel_comm(opts.tp);
  if (!comm.ok()) return serve_fail(comm.status().to_string(), 2);
  ServeCommandOptions o = opts;
  o.threads = threads_per_rank(o.threads, o.tp);
  if (o.tp > 1 && o.spec.mode != "off")
    return serve_fail("--spec with --tp: speculative decoding on a tensor-parallel model is not supported yet", 2);
  if (o.tp > 1 && o.preemption == "swap") o.preemption = "recompute";  // followers mirror steps, not swaps
  auto dev = find_device(o.device, o.threads, o.threads_batch, *comm && (*comm)->rank() > 0);
  if (!dev.ok()) return serve_fail(dev.status().to_string());
  const auto kvt = dtype_from_name(o.kv_dtype);
  if (!kvt) return serve_fail("unknown --kv-dtype '" + o.kv_dtype + "' (f16, bf16, f32, fp8_e4m3 or int8_pc)", 2);
  if (*comm && (*comm)->rank() > 0) return serve_follower(o, *dev, *kvt, *comm);
  server::ServeOptions so = o.serve;
  if (so.model_name.empty()) {
    std::filesystem::path p = std::filesystem::path(o.model).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();  // "dir/"
    so.model_name = p.stem().string();
  }
  // Listen first: while the model loads, /health answers 503 (a router or probe waits for 200).
  server::Server srv(so, signals);
  if (Status s = srv.start(); !s.ok()) return serve_fail(s.message());
  if (o.load_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.load_delay_ms));

  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> kv;
  LoadOptions lo;
  if (Status s = load_served_model(o, *dev, *kvt, *comm, &model, &kv, &lo); !s.ok()) return serve_fail(s.to_string());
  if (!load_loras(
          o.loras, *model,
          {.first_is_default = false, .quiet = false, .limits = {so.max_loras, so.max_lora_rank, so.max_cpu_loras}}))
    return;
  if (model->tp_size() > 1)
    std::fprintf(stderr, "serve: tensor-parallel over %d ranks (%s); preemption by recompute\n", model->tp_size(),
                 (*comm)->backend().c_str());
  auto kv_events = start_kv_events(o, *model, *kv);
  if (!kv_events.ok()) return serve_fail(kv_events.status().message());

  EngineConfig ec;
  SpecTarget st;
  st.model = model.get();
  st.kv_tokens = o.ctx;
  st.kv_dtype = *kvt;
  st.load = lo;
  auto spec = spec_config(o.spec, st);
  if (!spec.ok()) return serve_fail(spec.status().to_string(), 2);
  ec.spec = std::move(spec).value();
  ec.scheduler = o.scheduler;
  ec.scheduler.prefix_caching = !o.no_prefix_caching;
  ec.scheduler.swap = o.preemption == "swap";
  const int swap_tokens = o.swap_space > 0 ? o.swap_space : o.ctx;
  ec.scheduler.swap_blocks =
      ec.scheduler.swap ? (swap_tokens + kv->config().block_size - 1) / kv->config().block_size : 0;
  // A CPU device computes on our threads: fit on CPU time, immune to other processes' load.
  const DeviceInfo& di = model->device().info();
  if (di.type == DeviceType::kCpu && di.threads > 0 && !o.wall_clock_cost)
    ec.cost_cpu_threads = std::max(1, di.threads);
  StepLog step_log(nullptr, &std::fclose);
  if (Status s = open_step_log(o.step_log, &step_log, &ec); !s.ok()) return serve_fail(s.message(), 2);
  Engine engine(*model, *kv, model->codec(), ec);
  EngineThread engine_thread(engine);

  std::fprintf(stderr, "serve: %d-token KV cache, %d blocks\n", o.ctx, kv->config().n_blocks);
  srv.set_ready(*model, engine_thread, kv->config().n_blocks, kv->config().block_size);
  const Status served = srv.wait();
  if (!served.ok()) serve_fail(served.message());
  engine_thread.shutdown(/*drain=*/true);
  kv->pool().set_event_sink(nullptr);  // the publisher goes first
  std::fprintf(stderr, "serve: stopped\n");
}

// serve's flags: the model, its device and memory, and where the server listens.
void add_serve_model_flags(CLI::App* cmd, ServeCommandOptions* o) {
  cmd->add_option("-m,--model", o->model, "GGUF model file, or a Hugging Face checkpoint directory")->required();
  cmd->add_option("-d,--device", o->device, "device: auto, cpu, vulkan, cuda:0 ...")->capture_default_str();
  add_placement_options(cmd, &o->placement);
  add_tp_option(cmd, &o->tp);
  cmd->add_option("-c,--ctx", o->ctx, "KV cache capacity in tokens, shared by all requests")->capture_default_str()
      ->check(CLI::Range(16, 1 << 24));
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype: f16, bf16, f32, fp8_e4m3 or int8_pc (8-bit: an f32 scale per token and kv head)")->capture_default_str();
  cmd->add_flag("--swa-full", o->swa_full,
                "sliding-window layers keep the K/V of the whole context (default: only their window's, in a pool of their own)");
  cmd->add_option("--act-dtype", o->act_dtype, "activation dtype: auto (the device's preference: f32 on cpu and vulkan), f32, f16 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  add_thread_options(cmd, &o->threads, &o->threads_batch);
  cmd->add_flag("--no-prefix-caching", o->no_prefix_caching,
                "compute every prompt in full (a reference for the prefix cache's outputs and speed)");
  cmd->add_option("--preemption", o->preemption, "when KV blocks run out: swap (copy to host memory, up to --swap-space; beyond it recompute) or recompute (re-prefill later)")
      ->capture_default_str()->check(CLI::IsMember({"recompute", "swap"}));
  cmd->add_option("--swap-space", o->swap_space, "host memory for swapped KV, in tokens (--preemption swap; 0: as many as -c)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--host", o->serve.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->serve.port, "port (0: any free port, printed on stdout)")->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--pooling", o->pooling,
                  "pooling of /v1/embeddings: mean, cls or last (default: the model's own; a decoder has none)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_option("--model-name", o->serve.model_name, "the model id clients send (default: the file's stem)");
}

// serve's flags: LoRA adapters: the ones served, run-time updates, device slots and limits.
void add_serve_lora_flags(CLI::App* cmd, ServeCommandOptions* o) {
  cmd->add_option(
         "--lora", o->loras,
         "NAME=PATH: serve a LoRA adapter (a PEFT folder or a llama.cpp GGUF adapter file) under the model id NAME "
         "(repeatable); a request picks it with \"model\": \"NAME\" (vLLM) or \"lora\": [{\"id\": N, \"scale\": "
         "1}] (llama.cpp; GET /lora-adapters lists the ids); requests of different adapters and of the base model "
         "share steps (docs/lora.md)")
      ->allow_extra_args(false);
  cmd->add_flag(
         "--allow-runtime-lora-updates", o->serve.allow_runtime_lora_updates,
         "answer vLLM's POST /v1/load_lora_adapter {lora_name, lora_path} and /v1/unload_lora_adapter {lora_name}: "
         "adapters load and unload between engine steps while requests run (off by default)")
      ->envname("TESSERA_ALLOW_RUNTIME_LORA_UPDATING");
  cmd->add_option("--max-loras", o->serve.max_loras,
                  "device slots: the most adapters one engine step uses; a request whose adapter finds no slot "
                  "waits (0: a slot per loaded adapter)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--max-cpu-loras", o->serve.max_cpu_loras,
                  "the most adapters loaded at once (host memory), by --lora and at run time; each enters a free or "
                  "least recently used device slot when a step needs it (0: --max-loras, else no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65536));
  cmd->add_option("--max-lora-rank", o->serve.max_lora_rank, "refuse adapters of a higher rank (0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
}

// serve's flags: reasoning, admission and the engine step's scheduling.
void add_serve_scheduler_flags(CLI::App* cmd, ServeCommandOptions* o) {
  cmd->add_option("--reasoning-format", o->serve.reasoning_format,
                  "thinking models: auto (cut <think>...</think> into reasoning_content when the chat template writes those tags), "
                  "deepseek (always cut at them) or none (thoughts stay in content); a request's reasoning_format overrides")
      ->capture_default_str()->check(CLI::IsMember({"auto", "deepseek", "none"}));
  cmd->add_option("--reasoning-budget", o->serve.reasoning_budget,
                  "reasoning tokens before the close tag is forced (-1: unlimited; 0: thinking off through the template's "
                  "enable_thinking); a request's reasoning_budget overrides")
      ->capture_default_str()->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("--max-in-flight", o->serve.max_in_flight, "requests admitted at once; more get 429 + Retry-After")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  // A server's step budget is vLLM's chunked-prefill default: bursts of prompts prefill in few
  // steps (the library's 512 suits one embedded caller); the ITL factor still sizes chunks
  // beside running decodes.
  o->scheduler.max_batch_tokens = 2048;
  cmd->add_option("--max-batch-tokens", o->scheduler.max_batch_tokens, "token budget of one engine step")->capture_default_str()
      ->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--itl-factor", o->scheduler.itl_factor,
                  "while requests are decoding, size each step's prefill chunks so the step's predicted time (an online-fitted "
                  "cost model) stays within this factor of a decode-only step, unless more requests wait for their first token than "
                  "decode (then chunks fill the budget); 0: chunks always fill --max-batch-tokens")
      ->capture_default_str()->check(CLI::Range(0.0, 1000.0));
  cmd->add_option("--max-step-ms", o->scheduler.max_step_ms,
                  "also keep predicted steps with decodes under this many milliseconds (0: no absolute limit)")
      ->capture_default_str()->check(CLI::Range(0.0, 1e7));
  cmd->add_option("--min-prefill-chunk", o->scheduler.min_prefill_chunk,
                  "prefill tokens a step takes however slow it is predicted to be (so a prefill always progresses)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--step-cost-wall-clock", o->wall_clock_cost,
                "on a CPU device, fit the step cost model to wall time instead of process CPU time per thread "
                "(CPU time ignores other processes' load)");
  cmd->add_option("--step-log", o->step_log, "write a CSV line per engine step (tokens, prefill chunk, limit, predicted and "
                  "measured ms, fitted coefficients) to this file");
  cmd->add_option("--max-seqs", o->scheduler.max_seqs, "sequences in one engine step")->capture_default_str()->check(CLI::Range(1, 4096));
}

// serve's flags: connections: limits, deadlines, authentication, CORS, tokenisation of messages.
void add_serve_connection_flags(CLI::App* cmd, ServeCommandOptions* o) {
  cmd->add_option("--max-connections", o->serve.max_connections,
                  "connections served at once (a worker thread each); more are answered 503 and closed")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--listen-backlog", o->serve.listen_backlog, "connections the kernel queues before they are accepted")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--header-timeout", o->serve.header_timeout_s,
                  "seconds a client has to send a request's line and headers (slow senders are disconnected)")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--body-timeout", o->serve.body_timeout_s, "seconds a client has to send a request's body after its headers")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--keep-alive-timeout", o->serve.keep_alive_timeout_s, "seconds an idle keep-alive connection stays open")
      ->capture_default_str()->check(CLI::Range(1.0, 3600.0));
  cmd->add_option("--max-body-bytes", o->serve.max_body_bytes, "largest request body; larger ones get 413")
      ->capture_default_str()->check(CLI::Range(size_t(1024), size_t(1) << 34));
  cmd->add_option("--shutdown-grace", o->serve.shutdown_grace_s,
                  "after SIGTERM/SIGINT, seconds the requests in flight get to finish; the rest then end with finish_reason "
                  "\"abort\" (a second signal exits at once)")
      ->capture_default_str()->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--api-key", o->serve.api_key,
                  "require \"Authorization: Bearer KEY\" on every route but /health (also from $TESSERA_API_KEY)")
      ->envname("TESSERA_API_KEY");
  cmd->add_option("--allowed-origins", o->serve.allowed_origins,
                  "browser origins allowed to call the server (CORS), comma-separated, or '*'; by default a request "
                  "with an Origin header is refused")
      ->delimiter(',');
  cmd->add_flag("--parse-special-in-messages", o->serve.parse_special_in_messages,
                "tokenise special-token text typed in chat messages (e.g. <|im_end|>) as control tokens, as before; by "
                "default only the chat template's own markers are control tokens");
}

// serve's flags: KV events for KV-aware routers (docs/scale-out.md).
void add_serve_kv_event_flags(CLI::App* cmd, ServeCommandOptions* o) {
  cmd->add_option("--kv-events", o->kv_events.endpoint,
                  "publish the prefix cache's changes (vLLM's KV events: BlockStored, BlockRemoved, AllBlocksCleared) on a "
                  "ZeroMQ PUB socket bound to this address, e.g. tcp://127.0.0.1:5557 (docs/scale-out.md); off by default");
  cmd->add_flag("--kv-events-connect", o->kv_events.connect,
                "connect the --kv-events PUB socket to the address (a central subscriber binds it) instead of binding it");
  cmd->add_option("--kv-events-replay", o->kv_events.replay_endpoint,
                  "bind a ZeroMQ ROUTER socket here that resends buffered KV-event batches from a requested sequence number "
                  "(for subscribers that joined late or missed some)");
  cmd->add_option("--kv-events-topic", o->kv_events.topic, "the topic frame of every KV-event message (default: empty)");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeCommandOptions>();
  auto* cmd =
      app.add_subcommand("serve", "Serve an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions)");
  add_serve_model_flags(cmd, o.get());
  add_serve_lora_flags(cmd, o.get());
  add_serve_scheduler_flags(cmd, o.get());
  add_serve_connection_flags(cmd, o.get());
  add_serve_kv_event_flags(cmd, o.get());
  add_spec_options(cmd, &o->spec);
  cmd->add_option("--debug-load-delay-ms", o->load_delay_ms, "tests: stay in the loading state this long after binding")
      ->group("")->check(CLI::Range(0, 600000));
  cmd->callback([o] {
    const server::ServeOptions& so = o->serve;
    if (so.max_cpu_loras > 0 && so.max_cpu_loras < so.max_loras)
      return serve_fail("--max-cpu-loras " + std::to_string(so.max_cpu_loras) + " is below --max-loras " +
                            std::to_string(so.max_loras) +
                            ": the adapters in device slots are also held in host memory",
                        2);
    serve_command(*o);
  });
}

}  // namespace tessera::cli

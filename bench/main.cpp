// tessera-bench: per-device rooflines and kernel sweeps through the HAL, the quantised GEMV
// bandwidth figure, and comparisons between runs. See docs/bench.md.
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "bench/commands.h"

namespace {
using namespace tessera::bench;

// A subcommand and what runs when it is the one given.
struct Command {
  CLI::App* cmd;
  std::function<int()> run;
};

Command roofline_command(CLI::App& app) {
  auto a = std::make_shared<RooflineArgs>();
  auto* r = app.add_subcommand("roofline", "ceilings and a kernel sweep per device; JSON, CSV, table, SVG");
  r->add_option("--device", a->devices, "all, cpu, vulkan:0, ... (repeatable)");
  r->add_option("--out", a->out_dir, "output folder")->capture_default_str();
  r->add_flag("--quick", a->quick, "small shapes and short budgets (smoke tests)");
  r->add_flag("--hal-ceilings", a->hal_ceilings,
              "CPU: measure the ceilings through the HAL like any other device, not directly");
  return {r, [a] { return run_roofline(*a); }};
}

Command gemv_command(CLI::App& app) {
  auto a = std::make_shared<GemvArgs>();
  auto* g = app.add_subcommand("gemv", "quantised GEMV (M=1) bandwidth vs the measured peak read bandwidth");
  g->add_option("--threads", a->threads, "thread counts (repeatable)")->capture_default_str();
  g->add_option("--csv", a->csv, "also write the rows to this CSV file");
  g->add_option("--dtype", a->dtypes, "weight formats to measure (repeatable; default: all)");
  g->add_flag("--no-gemm", a->no_gemm, "skip the prefill GEMM figures");
  g->add_flag("--quick", a->quick, "smaller buffers, shorter budgets");
  g->add_flag("--rows", a->rows, "keep the weights in GGUF rows (skip the device's prepare_weight repacking)");
  g->add_option("--isa", a->isa,
                "run the CPU kernels on this SIMD target (avx2, avx3, avx3_dl, scalar) instead of the best one, "
                "to measure another machine's path");
  g->add_option("--gemm-m", a->gemm_m,
                "also time the GEMM at these M (repeatable), alternating prepared and row-layout weights");
  return {g, [a] { return run_gemv(*a); }};
}

Command plot_command(CLI::App& app) {
  auto a = std::make_shared<PlotArgs>();
  auto* p = app.add_subcommand("plot", "redraw the SVG plots of a saved roofline.json");
  p->add_option("JSON", a->json, "a report written by roofline")->required();
  p->add_option("--out", a->out_dir, "output folder (must exist)")->capture_default_str();
  return {p, [a] { return run_plot(*a); }};
}

Command compare_command(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  auto* c = app.add_subcommand("compare", "per-kernel time ratio between two runs or two devices");
  c->add_option("A", a->a, "first report (JSON)")->required();
  c->add_option("B", a->b, "second report (JSON); may be the same file as A")->required();
  c->add_option("--device-a", a->device_a, "device of A (default: its first)");
  c->add_option("--device-b", a->device_b, "device of B (default: its first)");
  return {c, [a] { return run_compare(*a); }};
}

Command model_command(CLI::App& app) {
  auto a = std::make_shared<ModelBenchArgs>();
  auto* m = app.add_subcommand("model", "prefill and decode tokens/s of a GGUF model on the CPU, as % of the rooflines");
  m->add_option("MODEL", a->model, "a GGUF file")->required();
  m->add_option("--threads", a->threads, "thread counts (repeatable)")->capture_default_str();
  m->add_option("--concurrency", a->concurrency, "simultaneous requests (repeatable)")->capture_default_str();
  m->add_option("--prompt", a->prompt, "prompt tokens per request")->capture_default_str();
  m->add_option("--decode", a->decode, "generated tokens per request")->capture_default_str();
  m->add_option("--repeats", a->repeats, "runs per figure (median)")->capture_default_str();
  m->add_option("--isa", a->isa,
                "run the CPU kernels on this SIMD target (avx2, avx3, avx3_dl, scalar) instead of the best one, "
                "to measure another machine's path");
  return {m, [a] { return run_model_bench(*a); }};
}

Command contention_command(CLI::App& app) {
  auto a = std::make_shared<ContentionBenchArgs>();
  auto* cn = app.add_subcommand("contention", "batch-1 prefill/decode tok/s beside 0, 1, 2 busy processes (started and "
                                "stopped by the bench): default vs fixed thread counts vs llama.cpp");
  cn->add_option("MODEL", a->model, "a GGUF file")->required();
  cn->add_option("--threads", a->threads, "fixed thread counts to compare (repeatable)")->capture_default_str();
  cn->add_option("--busy", a->busy, "busy background processes (repeatable)")->capture_default_str();
  cn->add_option("--prompt", a->prompt, "prompt tokens")->capture_default_str();
  cn->add_option("--decode", a->decode, "generated tokens")->capture_default_str();
  cn->add_option("--repeats", a->repeats, "runs per figure (median), configurations alternating")
      ->capture_default_str();
  cn->add_option("--max-seconds", a->max_seconds, "a busy process ends by itself after this long")
      ->capture_default_str();
  cn->add_option("--peer", a->peer, "llama-bench binary (default: the one under ~/.cache/tessera-peer, if built)");
  cn->add_flag("--no-peer", a->no_peer, "skip llama.cpp");
  return {cn, [a] { return run_contention_bench(*a); }};
}

#ifdef TESSERA_BENCH_HAVE_SERVE
Command serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeBenchArgs>();
  auto* s = app.add_subcommand("serve", "streamed requests against tessera serve at several concurrencies; scenarios");
  s->add_option("--model", a->model, "start a tessera serve on this GGUF file");
  s->add_option("--url", a->url, "or use the server at http://HOST:PORT");
  s->add_option("--server-bin", a->server_bin, "the tessera binary (default: next to tessera-bench)");
  s->add_option("--device", a->device, "the started server's device")->capture_default_str();
  s->add_option("--server-arg", a->server_args,
                "an argument for the started server (repeatable), e.g. --server-arg=--max-batch-tokens=64")
      ->allow_extra_args(false);
  s->add_option("--scenario", a->scenario, "load (concurrency levels), prefix or chunked")->capture_default_str();
  s->add_option("--out", a->out_dir, "output folder (serve[-SCENARIO].json and .csv)")->capture_default_str();
  s->add_option("--concurrency", a->concurrency, "concurrency levels (repeatable)")->capture_default_str();
  s->add_option("--requests", a->requests, "requests per level (0: max(8, 4 x concurrency))")->capture_default_str();
  s->add_option("--prompt-len", a->prompt_len, "mean prompt tokens")->capture_default_str();
  s->add_option("--prompt-spread", a->prompt_spread, "prompt tokens uniform in mean x [1 - s, 1 + s]")
      ->capture_default_str();
  s->add_option("--output-len", a->output_len, "mean output tokens (ignore_eos)")->capture_default_str();
  s->add_option("--output-spread", a->output_spread, "output tokens uniform in mean x [1 - s, 1 + s]")
      ->capture_default_str();
  s->add_option("--token-lo", a->token_lo, "prompt token ids from [lo, hi)")->capture_default_str();
  s->add_option("--token-hi", a->token_hi, "prompt token ids from [lo, hi)")->capture_default_str();
  s->add_option("--seed", a->seed, "prompt and length seed")->capture_default_str();
  s->add_option("--request-loras", a->request_loras,
                "load scenario: request i runs under LoRA adapter i % N (llama.cpp's \"lora\": [{\"id\", \"scale\"}], "
                "which tessera serve and llama-server both take); 0: the base model")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  s->add_option("--slo-ttft-ms", a->slo_ttft_ms, "goodput SLO on time to first token")->capture_default_str();
  s->add_option("--slo-tpot-ms", a->slo_tpot_ms, "goodput SLO on time per output token")->capture_default_str();
  s->add_option("--prefix-len", a->prefix_len, "prefix scenario: shared prefix tokens")->capture_default_str();
  s->add_option("--suffix-len", a->suffix_len, "prefix scenario: distinct suffix tokens")->capture_default_str();
  s->add_option("--rounds", a->rounds, "prefix scenario: rounds (distinct prefixes; medians)")->capture_default_str();
  s->add_option("--warm", a->warm, "prefix scenario: requests sharing the prefix before the measured one (>= 1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  s->add_option("--decodes", a->decodes, "chunked scenario: streaming decodes")->capture_default_str();
  s->add_option("--long-prompt", a->long_prompt, "chunked scenario: tokens of the prompt that arrives")
      ->capture_default_str();
  return {s, [a] { return run_serve_bench(*a); }};
}
#endif

Command moe_command(CLI::App& app) {
  auto a = std::make_shared<MoeBenchArgs>();
  auto* e = app.add_subcommand("moe", "a MoE model vs a dense model of equal active parameters: prefill/decode tokens/s, "
                                      "cost ratio, expert load");
  e->add_option("--moe", a->moe, "the mixture-of-experts GGUF")->required();
  e->add_option("--dense", a->dense, "the dense GGUF (FFN width = k x the expert width)")->required();
  e->add_option("--threads", a->threads, "CPU threads")->capture_default_str();
  e->add_option("--prompt", a->prompt, "prompt tokens")->capture_default_str();
  e->add_option("--decode", a->decode, "generated tokens")->capture_default_str();
  e->add_option("--repeats", a->repeats, "alternating runs per model (median)")->capture_default_str();
  return {e, [a] { return run_moe_bench(*a); }};
}

Command split_command(CLI::App& app) {
  auto a = std::make_shared<SplitBenchArgs>();
  auto* sl = app.add_subcommand("split",
                                "a model across --device and the CPU at several --gpu-layers vs the whole model on "
                                "--device: tokens/s and the copies between devices per step");
  sl->add_option("model", a->model, "GGUF model")->required();
  sl->add_option("--device", a->device, "the main device (vulkan, cuda:0, ...)")->capture_default_str();
  sl->add_option("--gpu-layers", a->gpu_layers, "placements to run, comma-separated (-1: all on --device)")
      ->delimiter(',')
      ->capture_default_str();
  sl->add_option("--threads", a->threads, "CPU threads")->capture_default_str();
  sl->add_option("--prompt", a->prompt, "prompt tokens")->capture_default_str();
  sl->add_option("--decode", a->decode, "generated tokens")->capture_default_str();
  sl->add_option("--repeats", a->repeats, "alternating rounds (median)")->capture_default_str();
  return {sl, [a] { return run_split_bench(*a); }};
}

Command attention_command(CLI::App& app) {
  auto a = std::make_shared<AttentionBenchArgs>();
  auto* t = app.add_subcommand("attention", "paged attention of a prefill chunk over a long context, per KV-cache format");
  t->add_option("--device", a->device, "cpu (with --threads), vulkan:0, ...")->capture_default_str();
  t->add_option("--threads", a->threads, "CPU threads")->capture_default_str();
  t->add_option("--ctx", a->ctx, "keys attended over")->capture_default_str();
  t->add_option("--new", a->fresh, "query tokens (the chunk)")->capture_default_str();
  t->add_option("--repeats", a->repeats, "timed calls (median)")->capture_default_str();
  return {t, [a] { return run_attention_bench(*a); }};
}

Command recurrent_command(CLI::App& app) {
  auto a = std::make_shared<RecurrentBenchArgs>();
  auto* rc = app.add_subcommand("recurrent", "a Gated DeltaNet layer's conv and delta rule over a prefill: token-by-token vs chunked form");
  rc->add_option("--device", a->device, "cpu (with --threads), vulkan:0, ...")->capture_default_str();
  rc->add_option("--threads", a->threads, "CPU threads")->capture_default_str();
  rc->add_option("--tokens", a->tokens, "prefill tokens of the one sequence")->capture_default_str();
  rc->add_option("--key-heads", a->hk, "key heads")->capture_default_str();
  rc->add_option("--value-heads", a->hv, "value heads")->capture_default_str();
  rc->add_option("--key-dim", a->dk, "key head dim")->capture_default_str();
  rc->add_option("--value-dim", a->dv, "value head dim")->capture_default_str();
  rc->add_option("--repeats", a->repeats, "timed calls per form, alternating (median)")->capture_default_str();
  return {rc, [a] { return run_recurrent_bench(*a); }};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessera-bench: rooflines, kernel sweeps and comparisons (docs/bench.md)"};
  app.require_subcommand(1);
  std::vector<Command> commands;
  commands.push_back(roofline_command(app));
  commands.push_back(gemv_command(app));
  commands.push_back(plot_command(app));
  commands.push_back(compare_command(app));
  commands.push_back(model_command(app));
  commands.push_back(contention_command(app));
#ifdef TESSERA_BENCH_HAVE_SERVE
  commands.push_back(serve_command(app));
#endif
  commands.push_back(moe_command(app));
  commands.push_back(split_command(app));
  commands.push_back(attention_command(app));
  commands.push_back(recurrent_command(app));
  CLI11_PARSE(app, argc, argv);
  for (const Command& c : commands)
    if (c.cmd->parsed()) return c.run();
  return 1;
}

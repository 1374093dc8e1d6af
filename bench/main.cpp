// tessera-bench: per-device rooflines and kernel sweeps through the HAL, the quantised GEMV
// bandwidth figure, and comparisons between runs. See docs/bench.md.
#include <CLI/CLI.hpp>

#include "bench/commands.h"

int main(int argc, char** argv) {
  using namespace tessera::bench;
  CLI::App app{"tessera-bench: rooflines, kernel sweeps and comparisons (docs/bench.md)"};
  app.require_subcommand(1);

  RooflineArgs roof;
  auto* r = app.add_subcommand("roofline", "ceilings and a kernel sweep per device; JSON, CSV, table, SVG");
  r->add_option("--device", roof.devices, "all, cpu, vulkan:0, ... (repeatable)");
  r->add_option("--out", roof.out_dir, "output folder")->capture_default_str();
  r->add_flag("--quick", roof.quick, "small shapes and short budgets (smoke tests)");
  r->add_flag("--hal-ceilings", roof.hal_ceilings,
              "CPU: measure the ceilings through the HAL like any other device, not directly");

  GemvArgs gemv;
  auto* g = app.add_subcommand("gemv", "quantised GEMV (M=1) bandwidth vs the measured peak read bandwidth");
  g->add_option("--threads", gemv.threads, "thread counts (repeatable)")->capture_default_str();
  g->add_option("--csv", gemv.csv, "also write the rows to this CSV file");
  g->add_option("--dtype", gemv.dtypes, "weight formats to measure (repeatable; default: all)");
  g->add_flag("--no-gemm", gemv.no_gemm, "skip the prefill GEMM figures");
  g->add_flag("--quick", gemv.quick, "smaller buffers, shorter budgets");
  g->add_flag("--rows", gemv.rows, "keep the weights in GGUF rows (skip the device's prepare_weight repacking)");
  g->add_option("--isa", gemv.isa,
                "run the CPU kernels on this SIMD target (avx2, avx3, avx3_dl, scalar) instead of the best one, "
                "to measure another machine's path");
  g->add_option("--gemm-m", gemv.gemm_m,
                "also time the GEMM at these M (repeatable), alternating prepared and row-layout weights");

  PlotArgs plot;
  auto* p = app.add_subcommand("plot", "redraw the SVG plots of a saved roofline.json");
  p->add_option("JSON", plot.json, "a report written by roofline")->required();
  p->add_option("--out", plot.out_dir, "output folder (must exist)")->capture_default_str();

  CompareArgs cmp;
  auto* c = app.add_subcommand("compare", "per-kernel time ratio between two runs or two devices");
  c->add_option("A", cmp.a, "first report (JSON)")->required();
  c->add_option("B", cmp.b, "second report (JSON); may be the same file as A")->required();
  c->add_option("--device-a", cmp.device_a, "device of A (default: its first)");
  c->add_option("--device-b", cmp.device_b, "device of B (default: its first)");

  ModelBenchArgs mb;
  auto* m = app.add_subcommand("model", "prefill and decode tokens/s of a GGUF model on the CPU, as % of the rooflines");
  m->add_option("MODEL", mb.model, "a GGUF file")->required();
  m->add_option("--threads", mb.threads, "thread counts (repeatable)")->capture_default_str();
  m->add_option("--concurrency", mb.concurrency, "simultaneous requests (repeatable)")->capture_default_str();
  m->add_option("--prompt", mb.prompt, "prompt tokens per request")->capture_default_str();
  m->add_option("--decode", mb.decode, "generated tokens per request")->capture_default_str();
  m->add_option("--repeats", mb.repeats, "runs per figure (median)")->capture_default_str();
  m->add_option("--isa", mb.isa,
                "run the CPU kernels on this SIMD target (avx2, avx3, avx3_dl, scalar) instead of the best one, "
                "to measure another machine's path");

  ContentionBenchArgs cb;
  auto* cn = app.add_subcommand("contention", "batch-1 prefill/decode tok/s beside 0, 1, 2 busy processes (started and "
                                "stopped by the bench): default vs fixed thread counts vs llama.cpp");
  cn->add_option("MODEL", cb.model, "a GGUF file")->required();
  cn->add_option("--threads", cb.threads, "fixed thread counts to compare (repeatable)")->capture_default_str();
  cn->add_option("--busy", cb.busy, "busy background processes (repeatable)")->capture_default_str();
  cn->add_option("--prompt", cb.prompt, "prompt tokens")->capture_default_str();
  cn->add_option("--decode", cb.decode, "generated tokens")->capture_default_str();
  cn->add_option("--repeats", cb.repeats, "runs per figure (median), configurations alternating")->capture_default_str();
  cn->add_option("--max-seconds", cb.max_seconds, "a busy process ends by itself after this long")->capture_default_str();
  cn->add_option("--peer", cb.peer, "llama-bench binary (default: the one under ~/.cache/tessera-peer, if built)");
  cn->add_flag("--no-peer", cb.no_peer, "skip llama.cpp");

#ifdef TESSERA_BENCH_HAVE_SERVE
  ServeBenchArgs sb;
  auto* s = app.add_subcommand("serve", "streamed requests against tessera serve at several concurrencies; scenarios");
  s->add_option("--model", sb.model, "start a tessera serve on this GGUF file");
  s->add_option("--url", sb.url, "or use the server at http://HOST:PORT");
  s->add_option("--server-bin", sb.server_bin, "the tessera binary (default: next to tessera-bench)");
  s->add_option("--device", sb.device, "the started server's device")->capture_default_str();
  s->add_option("--server-arg", sb.server_args, "an argument for the started server (repeatable), e.g. --server-arg=--max-batch-tokens=64")
      ->allow_extra_args(false);
  s->add_option("--scenario", sb.scenario, "load (concurrency levels), prefix or chunked")->capture_default_str();
  s->add_option("--out", sb.out_dir, "output folder (serve[-SCENARIO].json and .csv)")->capture_default_str();
  s->add_option("--concurrency", sb.concurrency, "concurrency levels (repeatable)")->capture_default_str();
  s->add_option("--requests", sb.requests, "requests per level (0: max(8, 4 x concurrency))")->capture_default_str();
  s->add_option("--prompt-len", sb.prompt_len, "mean prompt tokens")->capture_default_str();
  s->add_option("--prompt-spread", sb.prompt_spread, "prompt tokens uniform in mean x [1 - s, 1 + s]")->capture_default_str();
  s->add_option("--output-len", sb.output_len, "mean output tokens (ignore_eos)")->capture_default_str();
  s->add_option("--output-spread", sb.output_spread, "output tokens uniform in mean x [1 - s, 1 + s]")->capture_default_str();
  s->add_option("--token-lo", sb.token_lo, "prompt token ids from [lo, hi)")->capture_default_str();
  s->add_option("--token-hi", sb.token_hi, "prompt token ids from [lo, hi)")->capture_default_str();
  s->add_option("--seed", sb.seed, "prompt and length seed")->capture_default_str();
  s->add_option("--request-loras", sb.request_loras,
                "load scenario: request i runs under LoRA adapter i % N (llama.cpp's \"lora\": [{\"id\", \"scale\"}], "
                "which tessera serve and llama-server both take); 0: the base model")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  s->add_option("--slo-ttft-ms", sb.slo_ttft_ms, "goodput SLO on time to first token")->capture_default_str();
  s->add_option("--slo-tpot-ms", sb.slo_tpot_ms, "goodput SLO on time per output token")->capture_default_str();
  s->add_option("--prefix-len", sb.prefix_len, "prefix scenario: shared prefix tokens")->capture_default_str();
  s->add_option("--suffix-len", sb.suffix_len, "prefix scenario: distinct suffix tokens")->capture_default_str();
  s->add_option("--rounds", sb.rounds, "prefix scenario: rounds (distinct prefixes; medians)")->capture_default_str();
  s->add_option("--warm", sb.warm, "prefix scenario: requests sharing the prefix before the measured one (>= 1)")
      ->capture_default_str()->check(CLI::Range(1, 64));
  s->add_option("--decodes", sb.decodes, "chunked scenario: streaming decodes")->capture_default_str();
  s->add_option("--long-prompt", sb.long_prompt, "chunked scenario: tokens of the prompt that arrives")->capture_default_str();
#endif

  MoeBenchArgs moe;
  auto* e = app.add_subcommand("moe", "a MoE model vs a dense model of equal active parameters: prefill/decode tokens/s, "
                                      "cost ratio, expert load");
  e->add_option("--moe", moe.moe, "the mixture-of-experts GGUF")->required();
  e->add_option("--dense", moe.dense, "the dense GGUF (FFN width = k x the expert width)")->required();
  e->add_option("--threads", moe.threads, "CPU threads")->capture_default_str();
  e->add_option("--prompt", moe.prompt, "prompt tokens")->capture_default_str();
  e->add_option("--decode", moe.decode, "generated tokens")->capture_default_str();
  e->add_option("--repeats", moe.repeats, "alternating runs per model (median)")->capture_default_str();

  SplitBenchArgs sp;
  auto* sl = app.add_subcommand("split",
                                "a model across --device and the CPU at several --gpu-layers vs the whole model on "
                                "--device: tokens/s and the copies between devices per step");
  sl->add_option("model", sp.model, "GGUF model")->required();
  sl->add_option("--device", sp.device, "the main device (vulkan, cuda:0, ...)")->capture_default_str();
  sl->add_option("--gpu-layers", sp.gpu_layers, "placements to run, comma-separated (-1: all on --device)")
      ->delimiter(',')
      ->capture_default_str();
  sl->add_option("--threads", sp.threads, "CPU threads")->capture_default_str();
  sl->add_option("--prompt", sp.prompt, "prompt tokens")->capture_default_str();
  sl->add_option("--decode", sp.decode, "generated tokens")->capture_default_str();
  sl->add_option("--repeats", sp.repeats, "alternating rounds (median)")->capture_default_str();

  AttentionBenchArgs at;
  auto* t = app.add_subcommand("attention", "paged attention of a prefill chunk over a long context, per KV-cache format");
  t->add_option("--device", at.device, "cpu (with --threads), vulkan:0, ...")->capture_default_str();
  t->add_option("--threads", at.threads, "CPU threads")->capture_default_str();
  t->add_option("--ctx", at.ctx, "keys attended over")->capture_default_str();
  t->add_option("--new", at.fresh, "query tokens (the chunk)")->capture_default_str();
  t->add_option("--repeats", at.repeats, "timed calls (median)")->capture_default_str();

  RecurrentBenchArgs rb;
  auto* rc = app.add_subcommand("recurrent", "a Gated DeltaNet layer's conv and delta rule over a prefill: token-by-token vs chunked form");
  rc->add_option("--device", rb.device, "cpu (with --threads), vulkan:0, ...")->capture_default_str();
  rc->add_option("--threads", rb.threads, "CPU threads")->capture_default_str();
  rc->add_option("--tokens", rb.tokens, "prefill tokens of the one sequence")->capture_default_str();
  rc->add_option("--key-heads", rb.hk, "key heads")->capture_default_str();
  rc->add_option("--value-heads", rb.hv, "value heads")->capture_default_str();
  rc->add_option("--key-dim", rb.dk, "key head dim")->capture_default_str();
  rc->add_option("--value-dim", rb.dv, "value head dim")->capture_default_str();
  rc->add_option("--repeats", rb.repeats, "timed calls per form, alternating (median)")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
#ifdef TESSERA_BENCH_HAVE_SERVE
  if (s->parsed()) return run_serve_bench(sb);
#endif
  if (m->parsed()) return run_model_bench(mb);
  if (cn->parsed()) return run_contention_bench(cb);
  if (e->parsed()) return run_moe_bench(moe);
  if (sl->parsed()) return run_split_bench(sp);
  if (t->parsed()) return run_attention_bench(at);
  if (rc->parsed()) return run_recurrent_bench(rb);
  if (r->parsed()) return run_roofline(roof);
  if (g->parsed()) return run_gemv(gemv);
  if (p->parsed()) return run_plot(plot);
  return run_compare(cmp);
}

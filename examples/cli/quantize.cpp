// `tessera quantize IN.gguf|DIR OUT.gguf --type T`: rewrites a model's weights in another format
// under per-tensor rules (models/quantize/quantize.h), with a progress bar.
#include <unistd.h>

#include <cstdio>
#include <map>

#include "examples/cli/commands.h"
#include "core/registry.h"
#include "examples/cli/common.h"
#include "models/quantize/quantize.h"
#include "models/safetensors/convert.h"
#include "models/safetensors/safetensors.h"

namespace tessera::cli {

namespace {

struct QuantizeCliOptions {
  std::string in, out, type, embed_type, output_type;
  std::string calib, calib_device = "cpu";
  int64_t calib_tokens = 4096;
  std::vector<std::string> rules;
  bool dry_run = false, quiet = false;
  int threads = 0;
};

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

Result<QuantizeOptions> build_options(const QuantizeCliOptions& c) {
  QuantizeOptions o;
  TS_ASSIGN_OR_RETURN(o.type, parse_weight_type(c.type));
  if (!c.embed_type.empty()) {
    TS_ASSIGN_OR_RETURN(o.embed_type, parse_weight_type(c.embed_type));
  }
  if (!c.output_type.empty()) {
    TS_ASSIGN_OR_RETURN(o.output_type, parse_weight_type(c.output_type));
  }
  for (const std::string& r : c.rules) {
    TS_ASSIGN_OR_RETURN(QuantRule rule, parse_quant_rule(r));
    o.rules.push_back(std::move(rule));
  }
  o.threads = c.threads;
  return o;
}

void print_plan(const std::vector<TensorPlan>& plan) {
  std::printf("%-32s %-16s %-9s %-9s %10s  %s\n", "tensor", "shape", "from", "to", "bytes", "why");
  for (const TensorPlan& p : plan)
    std::printf("%-32s %-16s %-9s %-9s %10lld  %s%s%s\n", p.name.c_str(), shape_str(p.shape).c_str(), dtype_name(p.from),
                dtype_name(p.to), (long long)p.out_bytes, p.reason.c_str(), p.fallback.empty() ? "" : "; ",
                p.fallback.c_str());
}

// "q4_k 30, q5_0 180, f32 61": how many tensors of each written type; then each kind of
// fallback once, with its count and first tensor.
void print_summary(const std::vector<TensorPlan>& plan) {
  std::map<std::string, int> counts;
  std::map<std::string, std::pair<int, std::string>> fallbacks;  // why -> (count, first tensor)
  int64_t total = 0;
  for (const TensorPlan& p : plan) {
    ++counts[dtype_name(p.to)];
    total += p.out_bytes;
    if (p.fallback.empty()) continue;
    auto& f = fallbacks[p.fallback];
    if (f.first++ == 0) f.second = p.name;
  }
  std::string line;
  for (const auto& [name, n] : counts) line += (line.empty() ? "" : ", ") + name + " " + std::to_string(n);
  std::fprintf(stderr, "plan: %zu tensors (%s), %.1f MB of weights\n", plan.size(), line.c_str(), double(total) / 1e6);
  for (const auto& [why, f] : fallbacks)
    std::fprintf(stderr, "fallback: %d tensor%s (%s%s): %s\n", f.first, f.first == 1 ? "" : "s", f.second.c_str(),
                 f.first == 1 ? "" : ", ...", why.c_str());
}

void draw_bar(int64_t done, int64_t total, int* last) {
  const int pct = total > 0 ? int(100 * done / total) : 100;
  if (pct == *last) return;
  *last = pct;
  std::string bar(size_t(pct * 30 / 100), '#');
  bar.resize(30, '.');
  std::fprintf(stderr, "\rquantizing [%s] %3d%%", bar.c_str(), pct);
  if (done >= total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

// Runs the source model over --calib's text on --calib-device and keeps each weight's input
// statistics for GPTQ.
Status calibrate(const QuantizeCliOptions& c, CalibrationStats* out) {
  TS_ASSIGN_OR_RETURN(DevicePtr dev, Registry::global().find(c.calib_device));
  CalibrationOptions co;
  co.max_tokens = c.calib_tokens;
  if (!c.quiet && isatty(2))
    co.progress = [](int64_t d, int64_t t) {
      std::fprintf(stderr, "\rcalibrating: %lld/%lld tokens", (long long)d, (long long)t);
      if (d >= t) std::fprintf(stderr, "\n");
    };
  TS_ASSIGN_OR_RETURN(*out, collect_calibration(c.in, dev, c.calib, co));
  if (!c.quiet)
    std::fprintf(stderr, "calibration: %lld tokens of %s in %d windows, statistics for %zu weights\n",
                 (long long)out->tokens, c.calib.c_str(), out->windows, out->by_weight.size());
  return OkStatus();
}

void quantize_command(const QuantizeCliOptions& c) {
  auto opts = build_options(c);
  if (!opts.ok()) return fail(opts.status());
  auto src = safetensors::is_checkpoint_dir(c.in) ? safetensors::open_safetensors_source(c.in) : open_gguf_source(c.in);
  if (!src.ok()) return fail(src.status());
  auto plan = plan_quantization(**src, *opts);
  if (!plan.ok()) return fail(plan.status());
  if (c.dry_run) {
    print_plan(*plan);
    print_summary(*plan);
    return;
  }
  if (!c.quiet) print_summary(*plan);
  CalibrationStats calib;
  if (!c.calib.empty()) {
    auto st = calibrate(c, &calib);
    if (!st.ok()) return fail(st);
    opts->calib = &calib;
  }
  int last = -1;
  if (!c.quiet && isatty(2)) opts->progress = [&last](int64_t d, int64_t t) { draw_bar(d, t, &last); };
  auto stats = quantize_model(**src, *plan, *opts, c.out);
  if (!stats.ok()) return fail(stats.status());
  if (!c.quiet)
    std::fprintf(stderr, "wrote %s: %.1f MB in %.1f s%s\n", c.out.c_str(), double(stats->bytes_out) / 1e6, stats->seconds,
                 opts->calib ? (", " + std::to_string(stats->gptq_tensors) + " tensors with GPTQ").c_str() : "");
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto c = std::make_shared<QuantizeCliOptions>();
  auto* q = app.add_subcommand("quantize", "Rewrite a GGUF model's (or a Hugging Face checkpoint's) weights in another format");
  q->add_option("input", c->in, "input .gguf, or a Hugging Face checkpoint directory (config.json, *.safetensors)")->required();
  q->add_option("output", c->out, "output .gguf (not needed with --dry-run)");
  q->add_option("-t,--type", c->type,
                "target format: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k mxfp4 nvfp4 fp8_e4m3 fp8_e5m2 "
                "int8_pc int4_g32 int4_g64 int4_g128")
      ->required();
  q->add_option("--embed-type", c->embed_type, "token embedding format (default: the target at >= 8 bits, else q8_0)");
  q->add_option("--output-type", c->output_type, "output head format (default: the target at >= 8 bits, else q8_0)");
  q->add_option("--rule", c->rules, "REGEX=TYPE: tensors whose name matches get TYPE (first match wins; repeatable)");
  q->add_option("--calib", c->calib,
                "calibration text (UTF-8): run the model on it and write the covered weights with GPTQ instead of "
                "round-to-nearest");
  q->add_option("--calib-tokens", c->calib_tokens, "calibration tokens at most, from the text's start (0: all)")
      ->capture_default_str();
  q->add_option("--calib-device", c->calib_device, "device that runs the calibration (cpu, reference, ...)")
      ->capture_default_str();
  q->add_flag("--dry-run", c->dry_run, "print the per-tensor plan and write nothing");
  q->add_option("--threads", c->threads, "encoder threads (0: all cores)")->capture_default_str();
  q->add_flag("-q,--quiet", c->quiet, "no plan summary or progress bar");
  q->callback([c] {
    if (!c->dry_run && c->out.empty()) return fail("quantize: an output file is required (or --dry-run)", 2);
    quantize_command(*c);
  });
}

}  // namespace tessera::cli

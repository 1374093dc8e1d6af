// `tessera convert DIR OUT.gguf`: a Hugging Face checkpoint directory -> GGUF.
// `tessera convert BASE.gguf OUT.gguf --merge-lora ADAPTER`: a LoRA adapter merged into its base.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "examples/cli/commands.h"
#include "examples/cli/common.h"
#include "models/lora/merge.h"
#include "models/safetensors/convert.h"

namespace tessera::cli {

namespace {
struct ConvertArgs {
  std::string in, out, merge_lora;
  float lora_scale = 1.0f;
  bool quiet = false;
};

void merge(const ConvertArgs& a) {
  auto dev = find_device("cpu", 0, 0, true);
  if (!dev.ok()) return fail(dev.status());
  MergeLoraOptions o;
  o.scale = a.lora_scale;
  if (!a.quiet)
    o.progress = [](int64_t done, int64_t total) {
      std::fprintf(stderr, "\rmerging: %5.1f%%\033[K", total > 0 ? 100.0 * double(done) / double(total) : 100.0);
    };
  auto st = merge_lora_to_gguf(a.in, a.merge_lora, a.out, *dev, o);
  if (!a.quiet) std::fprintf(stderr, "\n");
  if (!st.ok()) return fail(st.status());
  std::printf("wrote %s (%d tensors merged, %.1f MB)\n", a.out.c_str(), st->merged_tensors,
              double(st->bytes_out) / 1e6);
}
}  // namespace

void add_convert_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert",
      "Convert a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json) to "
      "GGUF, each weight in the dtype it loads as (F32/F16/BF16, MXFP4, FP8/INT4 as Tessera GGUF types); "
      "or, with --merge-lora, merge a LoRA adapter into a GGUF model");
  auto a = std::make_shared<ConvertArgs>();
  cmd->add_option("input", a->in, "checkpoint directory (a GGUF model with --merge-lora)")->required();
  cmd->add_option("out", a->out, "output .gguf file")->required();
  cmd->add_option("--merge-lora", a->merge_lora,
                  "a LoRA adapter (PEFT folder or llama.cpp GGUF adapter) to merge into the GGUF input: each targeted "
                  "weight becomes W + scale * B A in its own format, everything else is copied");
  cmd->add_option("--lora-scale", a->lora_scale, "with --merge-lora: times the adapter's own scale")
      ->capture_default_str()
      ->check(CLI::Range(-100.0, 100.0));
  cmd->add_flag("-q,--quiet", a->quiet, "no progress");
  cmd->callback([a] {
    if (!a->merge_lora.empty()) return merge(*a);
    std::error_code ec;
    if (std::filesystem::is_regular_file(a->in, ec))
      return fail(InvalidArgument(a->in +
                                  " is a file: convert reads a checkpoint directory (or give --merge-lora ADAPTER "
                                  "to merge an adapter into this GGUF)"));
    safetensors::ConvertOptions o;
    int n = 0;
    if (!a->quiet)
      o.progress = [&n](const std::string& name) {
        std::fprintf(stderr, "\r%4d tensors (%s)\033[K", ++n, name.c_str());
      };
    const Status s = safetensors::convert_to_gguf(a->in, a->out, o);
    if (!a->quiet) std::fprintf(stderr, "\n");
    if (!s.ok()) return fail(s);
    std::printf("wrote %s\n", a->out.c_str());
  });
}

}  // namespace tessera::cli

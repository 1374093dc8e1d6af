// `tessera convert DIR OUT.gguf`: a Hugging Face checkpoint directory -> GGUF.
#include <cstdio>
#include <memory>

#include "examples/cli/commands.h"
#include "examples/cli/common.h"
#include "models/safetensors/convert.h"

namespace tessera::cli {

void add_convert_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert",
                                 "Convert a Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json) to "
                                 "GGUF, each weight in the dtype it loads as (F32/F16/BF16, MXFP4, FP8/INT4 as Tessera GGUF types)");
  auto dir = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("dir", *dir, "checkpoint directory")->required();
  cmd->add_option("out", *out, "output .gguf file")->required();
  cmd->add_flag("-q,--quiet", *quiet, "no progress");
  cmd->callback([dir, out, quiet] {
    safetensors::ConvertOptions o;
    int n = 0;
    if (!*quiet) o.progress = [&n](const std::string& name) { std::fprintf(stderr, "\r%4d tensors (%s)\033[K", ++n, name.c_str()); };
    const Status s = safetensors::convert_to_gguf(*dir, *out, o);
    if (!*quiet) std::fprintf(stderr, "\n");
    if (!s.ok()) return fail(s);
    std::printf("wrote %s\n", out->c_str());
  });
}

}  // namespace tessera::cli

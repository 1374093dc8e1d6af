// tessera: the command-line front end. One subcommand per file under examples/cli/.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "examples/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: portable LLM inference (CPU, Vulkan, CUDA, HIP)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("tessera ") + TESSERA_VERSION);
  tessera::cli::add_info_command(app);
  tessera::cli::add_generate_commands(app);
  tessera::cli::add_token_commands(app);
  tessera::cli::add_convert_command(app);
  tessera::cli::add_quantize_command(app);
  tessera::cli::add_embed_command(app);
#ifdef TESSERA_HAVE_SERVE
  tessera::cli::add_serve_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return tessera::cli::exit_code();
}

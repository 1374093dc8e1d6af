#pragma once
#include <CLI/CLI.hpp>

namespace tessera::cli {

// Each adds one subcommand whose callback runs it and records the exit code.
void add_info_command(CLI::App& app);

void set_exit_code(int code);
int exit_code();

}  // namespace tessera::cli

#pragma once
#include <CLI/CLI.hpp>

namespace tessera::cli {

// Each adds one subcommand whose callback runs it and records the exit code.
void add_info_command(CLI::App& app);
void add_generate_commands(CLI::App& app);  // run, chat
void add_token_commands(CLI::App& app);     // tokenize, eval, perplexity
void add_serve_command(CLI::App& app);      // serve (OpenAI-compatible HTTP)
void add_convert_command(CLI::App& app);    // convert (HF checkpoint -> GGUF)
void add_quantize_command(CLI::App& app);   // quantize
void add_embed_command(CLI::App& app);      // embed (sentence embeddings)

void set_exit_code(int code);
int exit_code();

}  // namespace tessera::cli

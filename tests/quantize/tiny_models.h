// Tiny random models for the quantize tests, written once per test binary by make_tiny_model
// ($TESSERA_BIN) into a temporary folder.
#pragma once
#include <gtest/gtest.h>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/support/test_support.h"

namespace tessera::testing {

class TinyModels : public ::testing::Test {
 protected:
  // The folder of the built binaries (tessera, make_tiny_model).
  static std::string bin() {
    const char* b = std::getenv("TESSERA_BIN");
    return b ? b : "build/bin";
  }
  static void SetUpTestSuite() {
    dir_ = process_temp_dir("tessera_quantize");
    // llama: dim 64, separate output head. qwen3: tied output head. wide: dim 256 and FFN 512,
    // so the 256-element k-quant blocks fit (dim 64 rows make them fall back).
    for (const std::string& args : {"--arch llama --out " + dir_ + "/llama.gguf",
                                   "--arch qwen3 --out " + dir_ + "/qwen3.gguf",
                                   "--arch llama --dim 256 --heads 4 --kv-heads 2 --ff 512 --out " + dir_ + "/wide.gguf"}) {
      ASSERT_EQ(run_make_tiny_model("--dtype f32 " + args), "");
    }
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static std::string path(const std::string& name) { return dir_ + "/" + name; }

  static inline std::string dir_;
};

}  // namespace tessera::testing

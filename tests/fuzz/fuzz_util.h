// Shared helpers of the libFuzzer targets: failing loudly on a broken invariant, a scratch
// folder for targets that must go through the filesystem (checkpoint directories, model files),
// and the paths of the test data and models (the same environment variables the unit tests use).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

#include "core/status.h"

namespace tessera::fuzz {

// A broken invariant: print and abort, which libFuzzer reports as a crash with the input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

// A setup step that must succeed (the target cannot fuzz anything without it).
inline void require(const Status& s, const char* what) {
  if (!s.ok()) fail(std::string(what) + ": " + s.to_string());
}

// A per-process scratch folder, in RAM when /dev/shm exists (targets write a file per input);
// removed at exit (a crash leaves it, beside the crashing input).
inline const std::string& scratch_dir() {
  struct Dir {
    std::string path;
    Dir() {
      namespace fs = std::filesystem;
      std::error_code ec;
      const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
      path = (base / ("tessera_fuzz_" + std::to_string(::getpid()))).string();
      fs::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return dir.path;
}

inline void write_file(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) fail("cannot write " + path);
}

// TESSERA_FUZZ_VERBOSE=1: a target says what became of each input ("ok" or the error), to
// check that the seeds get past the parser into the code behind it.
inline void note(const char* what, const Status& s) {
  static const bool verbose = std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s: %s\n", what, s.ok() ? "ok" : s.to_string().c_str());
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
// TESSERA_TEST_DATA / TESSERA_MODELS as CTest sets them; else relative to the source tree.
inline std::string test_data_path(const std::string& name) {
  return env_or("TESSERA_TEST_DATA", TESSERA_SOURCE_DIR "/tests/data") + "/" + name;
}
inline std::string model_path(const std::string& name) {
  return env_or("TESSERA_MODELS", TESSERA_SOURCE_DIR "/models-cache") + "/" + name;
}

}  // namespace tessera::fuzz

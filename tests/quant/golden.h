// Golden data for the quant tests (tests/data/quant/, written by make_golden.py) and the
// bridge to the gguf package (tests/data/quant/gguf_check.py).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "quant/dtype.h"

namespace tessera::testing {

struct GgufGolden {
  int gguf_type = 0;
  int kind = 0;  // 0: random bytes, 1: input quantised by the gguf package, 2: SmolLM2 rows
  int64_t n = 0;
  std::vector<float> input;  // kind 1 only
  std::vector<uint8_t> bytes;
  std::vector<float> expected;  // gguf.quants.dequantize(bytes)
};

// The records of gguf_golden.bin; an error message instead when the file is missing or malformed.
std::vector<GgufGolden> load_gguf_golden(std::string* error);
// The records of |gguf_type| of |kind|.
std::vector<GgufGolden> gguf_golden_of(int gguf_type, int kind, std::string* error);

// Sections of fp8_golden.bin by tag, as raw bytes.
std::vector<uint8_t> fp8_golden_section(uint32_t tag, uint32_t* count, std::string* error);

// Index of the first element whose f32 bits differ, or -1.
int64_t first_bit_mismatch(const std::vector<float>& a, const std::vector<float>& b);

// One block row quantised by us, to check with the gguf package.
struct GgufCheck {
  DType dtype;
  std::vector<uint8_t> bytes;
  std::vector<float> ours;  // our dequantisation of |bytes|
};
// Runs gguf_check.py on |checks|. Returns its exit status: 0 all match, 1 mismatch, 77 when
// python3 or the gguf package is unavailable. |log| gets the script's output.
int run_gguf_check(const std::vector<GgufCheck>& checks, std::string* log);

}  // namespace tessera::testing

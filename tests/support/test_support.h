// Shared test helpers: seeded random data, host tensors, error metrics.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.h"
#include "core/tensor.h"

namespace tessera::testing {

using Rng = std::mt19937_64;

// Uniform floats in [lo, hi); never all zeros.
std::vector<float> random_floats(Rng& rng, int64_t n, float lo = -1.0f, float hi = 1.0f);
// Values with occasional large outliers (x100), for quantisation tests.
std::vector<float> outlier_floats(Rng& rng, int64_t n);

// Encodes |values| (row-major, rows of |desc|.cols()) into |desc|'s dtype bytes.
std::vector<uint8_t> encode(const Tensor& desc, const std::vector<float>& values);
// Decodes a contiguous tensor's bytes to doubles (any dtype).
std::vector<double> decode(const Tensor& desc, const void* bytes);
// Downloads any contiguous tensor from its device and decodes it.
std::vector<double> download_values(Device& device, const Tensor& t);

// Normalised mean squared error: sum((a-b)^2) / sum(b^2), with b the reference.
double nmse(const std::vector<double>& a, const std::vector<double>& ref);
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
bool all_finite(const std::vector<double>& a);

// Runs $TESSERA_BIN/make_tiny_model (default build/bin) with |args|, its output discarded;
// returns the command line when it fails, "" when it succeeds.
std::string run_make_tiny_model(const std::string& args);
// A fresh folder under the system temp dir, named by |tag| and this process id.
std::string process_temp_dir(const std::string& tag);

// The skip policy. A test may skip only for absent hardware (no Vulkan or GPU device, a device
// that does not claim an optional dtype): TESSERA_SKIP_HARDWARE() << "why". Anything else a test
// needs and cannot find (a Python package, a tool, the model file) is TESSERA_SKIP_MISSING() <<
// "why": a skip on a developer's machine, a failure under CI=true, so CI never goes green over
// tests that did not run. .ci/check-skips fails the run on any skip not marked "[hardware]".
bool running_in_ci();
::testing::TestPartResult::Type missing_result_type();

}  // namespace tessera::testing

// Both return from the current function (a TEST body, SetUp, or another void function).
#define TESSERA_SKIP_HARDWARE() GTEST_SKIP() << "[hardware] "
#define TESSERA_SKIP_MISSING()                                                                       \
  return ::testing::internal::AssertHelper(::tessera::testing::missing_result_type(), __FILE__,    \
                                           __LINE__,                                                \
                                           ::tessera::testing::running_in_ci()                      \
                                               ? "[missing, and CI=true: a test never skips for it] " \
                                               : "[missing] ") = ::testing::Message()

#include "tests/support/test_support.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/host_buffer.h"
#include "core/reference/reference.h"

namespace tessera::testing {

bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::strcmp(ci, "true") == 0;
}

::testing::TestPartResult::Type missing_result_type() {
  return running_in_ci() ? ::testing::TestPartResult::kFatalFailure : ::testing::TestPartResult::kSkip;
}


std::vector<float> random_floats(Rng& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  if (n > 0 && v[0] == 0.0f) v[0] = hi * 0.5f;
  return v;
}

std::vector<float> outlier_floats(Rng& rng, int64_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng) * (pick(rng) == 0 ? 100.0f : 1.0f);
  return v;
}

std::vector<uint8_t> encode(const Tensor& desc, const std::vector<float>& values) {
  Tensor t = desc;
  t.set_contiguous_strides();
  std::vector<uint8_t> bytes(static_cast<size_t>(t.nbytes()));
  const int64_t cols = t.cols();
  const auto& tr = dtype_traits(t.dtype);
  for (int64_t r = 0; r < t.rows(); ++r) {
    uint8_t* dst = bytes.data() + r * t.row_bytes();
    const float* src = values.data() + r * cols;
    if (tr.quantize_row) {
      tr.quantize_row(src, dst, cols);
    } else if (t.dtype == DType::kI32) {
      for (int64_t c = 0; c < cols; ++c) { const int32_t v = int32_t(src[c]); std::memcpy(dst + c * 4, &v, 4); }
    } else if (t.dtype == DType::kI8) {
      for (int64_t c = 0; c < cols; ++c) dst[c] = uint8_t(int8_t(src[c]));
    }
  }
  return bytes;
}

std::vector<double> decode(const Tensor& desc, const void* bytes) {
  Tensor t = desc;
  t.set_contiguous_strides();
  t.buffer = HostBuffer::wrap(nullptr, const_cast<void*>(bytes), size_t(t.nbytes()), nullptr);
  t.offset = 0;
  std::vector<double> out;
  out.reserve(size_t(t.numel()));
  for (int64_t r = 0; r < t.rows(); ++r) {
    const auto row = ref::load_row(t, r);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

std::vector<double> download_values(Device& device, const Tensor& t) {
  std::vector<uint8_t> bytes(static_cast<size_t>(t.nbytes()));
  const Status s = device.download(t, bytes.data(), bytes.size());
  if (!s.ok()) return {};
  return decode(t, bytes.data());
}

double nmse(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0.0 ? num / den : num;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

bool all_finite(const std::vector<double>& a) {
  for (double x : a)
    if (!std::isfinite(x)) return false;
  return true;
}

std::string run_make_tiny_model(const std::string& args) {
  const char* bin = std::getenv("TESSERA_BIN");
  const std::string cmd = std::string(bin ? bin : "build/bin") + "/make_tiny_model " + args + " > /dev/null";
  return std::system(cmd.c_str()) == 0 ? std::string() : cmd;
}

std::string process_temp_dir(const std::string& tag) {
  const std::string dir = (std::filesystem::temp_directory_path() / (tag + "_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace tessera::testing

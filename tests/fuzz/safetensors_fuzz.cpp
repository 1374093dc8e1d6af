// libFuzzer target for the safetensors header (models/safetensors/reader.cpp). Any input must be
// rejected with a Status or parse into a File whose tensors keep the promises safetensors.h
// makes: each lies inside the data section, none overlap, byte counts match dtype x shape, and
// find() returns each by name. ASan/UBSan catch the rest.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "models/safetensors/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace tessera::safetensors {
namespace {

void check(const File& f, size_t size) {
  uint64_t header = 0;
  std::memcpy(&header, f.base(), 8);
  const uint64_t data_start = 8 + header;
  uint64_t sum = 0;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const TensorInfo& t : f.tensors()) {
    if (f.find(t.name) != &t) fuzz::fail("find('" + t.name + "') does not return its own entry");
    if (t.shape.size() > size_t(kMaxRank)) fuzz::fail("rank above kMaxRank accepted");
    uint64_t want = uint64_t(st_dtype_size(t.dtype));
    for (int64_t d : t.shape) {
      if (d < 0) fuzz::fail("negative dimension accepted");
      want *= uint64_t(d);
    }
    if (want != t.nbytes) fuzz::fail("'" + t.name + "': nbytes " + std::to_string(t.nbytes) + " != dtype x shape");
    if (t.offset < data_start || t.offset > size || t.nbytes > size - t.offset)
      fuzz::fail("'" + t.name + "' lies outside the data section");
    if (t.nbytes) spans.push_back({t.offset, t.offset + t.nbytes});
    // Touch every byte: an out-of-range pointer is an ASan report.
    for (uint64_t k = 0; k < t.nbytes; ++k) sum += f.data(t)[k];
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i - 1].second > spans[i].first) fuzz::fail("overlapping tensors accepted");
  for (const auto& [k, v] : f.metadata()) sum += k.size() + v.size();
  volatile uint64_t sink = sum;
  (void)sink;
}

}  // namespace
}  // namespace tessera::safetensors

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::safetensors;
  auto f = File::open_memory(data, size, "fuzz.safetensors");
  tessera::fuzz::note("safetensors", f.status());
  if (f.ok()) check(**f, size);
  return 0;
}

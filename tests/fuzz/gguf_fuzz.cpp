// libFuzzer target for the GGUF reader. Any input must either be rejected with a Status or
// parse into a File whose every tensor lies inside the input; ASan/UBSan catch the rest.
// A parsed file must also survive a Writer round trip: serialise -> parse -> serialise gives the
// same bytes (the writer emits only what the reader accepts).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "models/gguf/gguf.h"

namespace tessera::gguf {
namespace {

// Rewrites everything |f| holds with Writer.
Result<std::vector<uint8_t>> rewrite(const File& f) {
  Writer w;
  if (f.alignment() != kDefaultAlignment) w.set_alignment(f.alignment());
  for (const auto& [k, v] : f.metadata()) w.add(k, v);
  for (const auto& t : f.tensors()) {
    std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.rank);
    TS_RETURN_IF_ERROR(w.add_tensor(t.name, t.dtype, shape, f.tensor_data(t), t.nbytes));
  }
  return w.serialize();
}

void check(const File& f) {
  // Touch every byte of every tensor: an out-of-range offset is an ASan report.
  uint64_t sum = 0;
  for (const auto& t : f.tensors()) {
    const auto* p = static_cast<const uint8_t*>(f.tensor_data(t));
    for (uint64_t k = 0; k < t.nbytes; ++k) sum += p[k];
  }
  // Every typed getter on every key must return a value or a Status, never crash.
  for (const auto& [k, v] : f.metadata()) {
    sum += f.get_string(k).ok() + f.get_int(k).ok() + f.get_float(k).ok() + f.get_bool(k).ok() +
           f.get_string_array(k).ok() + f.get_int_array(k).ok() + f.get_float_array(k).ok();
  }
  volatile uint64_t sink = sum;
  (void)sink;
}

}  // namespace
}  // namespace tessera::gguf

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::gguf;
  auto f = File::open_memory(data, size, "fuzz.gguf");
  if (!f.ok()) return 0;
  check(**f);
  auto once = rewrite(**f);
  if (!once.ok()) {
    std::fprintf(stderr, "rewrite of an accepted file failed: %s\n",
                 once.status().to_string().c_str());
    std::abort();
  }
  auto f2 = File::open_memory(once->data(), once->size(), "rewrite.gguf");
  if (!f2.ok()) {
    std::fprintf(stderr, "rewritten file rejected: %s\n", f2.status().to_string().c_str());
    std::abort();
  }
  auto twice = rewrite(**f2);
  if (!twice.ok() || *twice != *once) {
    std::fprintf(stderr, "rewrite is not stable\n");
    std::abort();
  }
  return 0;
}

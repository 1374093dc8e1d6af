// libFuzzer target for a sharded checkpoint's model.safetensors.index.json (Checkpoint::open in
// models/safetensors/reader.cpp). The input is the index; the folder beside it holds two fixed
// shards (a.safetensors: "x", "y"; b.safetensors: "z") and a config.json. An index that is
// accepted must agree with the shards: every tensor it lists is found, in the shard it names.
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>

#include "models/safetensors/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace tessera::safetensors {
namespace {

// A shard holding F32 tensors of 2 elements each, one after another.
std::string shard(const std::vector<std::string>& names) {
  nlohmann::json h = nlohmann::json::object();
  for (size_t i = 0; i < names.size(); ++i)
    h[names[i]] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8 * i, 8 * i + 8}}};
  const std::string text = h.dump();
  const uint64_t n = text.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  out += text;
  out += std::string(8 * names.size(), '\x01');
  return out;
}

const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string d = fuzz::scratch_dir() + "/ckpt";
    std::filesystem::create_directories(d);
    fuzz::write_file(d + "/a.safetensors", shard({"x", "y"}));
    fuzz::write_file(d + "/b.safetensors", shard({"z"}));
    fuzz::write_file(d + "/config.json", "{}");
    return d;
  }();
  return dir;
}

void check(const Checkpoint& c, std::string_view index) {
  const auto j = nlohmann::json::parse(index, nullptr, false);
  if (j.is_discarded() || !j.contains("weight_map")) fuzz::fail("accepted an index without a weight_map");
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    const TensorRef r = c.find(it.key());
    if (!r.file) fuzz::fail("index tensor '" + it.key() + "' accepted but not found");
    if (std::filesystem::path(r.file->path()).filename() != it.value().get<std::string>())
      fuzz::fail("index tensor '" + it.key() + "' found in another shard than the index names");
  }
  for (const std::string& n : c.names()) {
    const TensorRef r = c.find(n);
    if (!r.file || r.info->name != n) fuzz::fail("names() lists '" + n + "' but find() disagrees");
    volatile uint8_t b = r.data()[r.info->nbytes - 1];
    (void)b;
  }
}

}  // namespace
}  // namespace tessera::safetensors

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::safetensors;
  const std::string& dir = checkpoint_dir();
  const std::string_view index(reinterpret_cast<const char*>(data), size);
  tessera::fuzz::write_file(dir + "/model.safetensors.index.json", index);
  auto c = Checkpoint::open(dir);
  tessera::fuzz::note("checkpoint", c.status());
  if (c.ok()) check(**c, index);
  return 0;
}

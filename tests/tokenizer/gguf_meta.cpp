#include "tests/tokenizer/gguf_meta.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

namespace tessera::testing {
namespace {

// Reads the metadata straight from the stream: it sits at the front of the file, so the
// tensor data (most of the file) is never touched.
class Cursor {
 public:
  explicit Cursor(std::ifstream& f) : f_(f) {}
  bool ok() const { return ok_; }
  template <class T>
  T get() {
    T v{};
    if (!f_.read(reinterpret_cast<char*>(&v), sizeof(T))) ok_ = false;
    return v;
  }
  std::string str() {
    const auto n = get<uint64_t>();
    if (!ok_ || n > (1u << 24)) { ok_ = false; return {}; }
    std::string s(n, '\0');
    if (!f_.read(s.data(), static_cast<std::streamsize>(n))) ok_ = false;
    return s;
  }
  void skip(uint64_t n) { if (!f_.seekg(static_cast<std::streamoff>(n), std::ios::cur)) ok_ = false; }

 private:
  std::ifstream& f_;
  bool ok_ = true;
};

uint64_t scalar_size(uint32_t type) {
  switch (type) {
    case 0: case 1: case 7: return 1;
    case 2: case 3: return 2;
    case 4: case 5: case 6: return 4;
    case 10: case 11: case 12: return 8;
    default: return 0;
  }
}

int64_t read_int(Cursor& c, uint32_t type) {
  switch (type) {
    case 0: return c.get<uint8_t>();
    case 1: return c.get<int8_t>();
    case 4: return c.get<uint32_t>();
    case 5: return c.get<int32_t>();
    case 10: return static_cast<int64_t>(c.get<uint64_t>());
    case 11: return c.get<int64_t>();
    case 7: return c.get<uint8_t>();
    default: c.skip(scalar_size(type)); return 0;
  }
}

}  // namespace

Result<GgufVocab> read_gguf_vocab(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound(path + ": cannot open");
  Cursor c(f);
  if (c.get<uint32_t>() != 0x46554747u) return InvalidArgument(path + ": not a GGUF file");
  c.get<uint32_t>();  // version
  c.get<uint64_t>();  // tensor count
  const auto n_kv = c.get<uint64_t>();
  GgufVocab out;
  TokenizerData& d = out.data;
  for (uint64_t i = 0; i < n_kv && c.ok(); ++i) {
    const std::string key = c.str();
    const auto type = c.get<uint32_t>();
    if (type == 8) {
      const std::string v = c.str();
      if (key == "tokenizer.ggml.model") d.model = v;
      else if (key == "tokenizer.ggml.pre") d.pre = v;
      else if (key == "tokenizer.chat_template") out.chat_template = v;
    } else if (type == 9) {
      const auto et = c.get<uint32_t>();
      const auto n = c.get<uint64_t>();
      for (uint64_t k = 0; k < n && c.ok(); ++k) {
        if (et == 8) {
          std::string s = c.str();
          if (key == "tokenizer.ggml.tokens") d.tokens.push_back(std::move(s));
          else if (key == "tokenizer.ggml.merges") d.merges.push_back(std::move(s));
        } else if (et == 6 && key == "tokenizer.ggml.scores") {
          d.scores.push_back(c.get<float>());
        } else if (key == "tokenizer.ggml.token_type") {
          d.token_types.push_back(static_cast<int32_t>(read_int(c, et)));
        } else if (scalar_size(et) > 0) {
          c.skip(scalar_size(et));
        } else {
          return InvalidArgument(path + ": key '" + key + "': unsupported array type");
        }
      }
    } else if (scalar_size(type) > 0) {
      const int64_t v = read_int(c, type);
      if (key == "tokenizer.ggml.bos_token_id") d.bos = static_cast<int32_t>(v);
      else if (key == "tokenizer.ggml.eos_token_id") d.eos = static_cast<int32_t>(v);
      else if (key == "tokenizer.ggml.eot_token_id") d.eot = static_cast<int32_t>(v);
      else if (key == "tokenizer.ggml.unknown_token_id") d.unk = static_cast<int32_t>(v);
      else if (key == "tokenizer.ggml.padding_token_id") d.pad = static_cast<int32_t>(v);
      else if (key == "tokenizer.ggml.add_bos_token") d.add_bos = v != 0;
      else if (key == "tokenizer.ggml.add_eos_token") d.add_eos = v != 0;
      else if (key == "tokenizer.ggml.add_space_prefix") d.add_space_prefix = v != 0;
    } else {
      return InvalidArgument(path + ": key '" + key + "': unsupported type " + std::to_string(type));
    }
  }
  if (!c.ok()) return DataLoss(path + ": truncated metadata");
  return out;
}

}  // namespace tessera::testing

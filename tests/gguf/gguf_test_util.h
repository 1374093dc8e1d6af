// Helpers shared by the GGUF tests: random bytes, temp paths, and byte-level mutation of a
// serialised file (find a tensor's info record by its name, patch fields in place).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace tessera::gguf::testing {

inline std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  if (n > 0 && v[0] == 0) v[0] = 0x5a;  // never all zeros
  return v;
}

// A per-process path under the temp dir, so parallel test runs do not collide.
inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("tessera_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Offset of the first occurrence of |needle| in |bytes|, or SIZE_MAX.
inline size_t find_bytes(const std::vector<uint8_t>& bytes, const std::string& needle) {
  for (size_t k = 0; k + needle.size() <= bytes.size(); ++k)
    if (std::memcmp(bytes.data() + k, needle.data(), needle.size()) == 0) return k;
  return SIZE_MAX;
}

template <class T>
void poke(std::vector<uint8_t>& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}
template <class T>
T peek(const std::vector<uint8_t>& bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

// Field offsets of one tensor info record, located by the tensor's name.
struct InfoFields {
  size_t name_len;  // u64 length prefix
  size_t n_dims;    // u32
  size_t ne0;       // u64 ne[0], then ne[1]...
  size_t type;      // u32
  size_t offset;    // u64
};
inline InfoFields tensor_info_fields(const std::vector<uint8_t>& bytes, const std::string& name) {
  // The name string is preceded by its u64 length; search for both to skip metadata mentions.
  std::string needle(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(needle.data(), &len, 8);
  needle += name;
  const size_t at = find_bytes(bytes, needle);
  InfoFields f{};
  f.name_len = at;
  f.n_dims = at + 8 + name.size();
  const uint32_t n = peek<uint32_t>(bytes, f.n_dims);
  f.ne0 = f.n_dims + 4;
  f.type = f.ne0 + 8 * n;
  f.offset = f.type + 4;
  return f;
}

}  // namespace tessera::gguf::testing

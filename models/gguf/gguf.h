// GGUF: the model file format Tessera loads. A File maps one .gguf read-only and validates it
// completely up front, so everything after open() (metadata lookups, tensor pointers) can trust
// the bytes. A Writer builds a GGUF v3 file (tests, the tiny-model tool, `tessera quantize`).
//
// Layout (little endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count, the key/value
// pairs, the tensor infos (name, n_dims, ne[n_dims] innermost first, ggml type, offset relative
// to the data section), padding to general.alignment (default 32), then the tensor data.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "quant/dtype.h"

namespace tessera::gguf {

enum class ValueType : uint32_t {
  kU8 = 0, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64,
};
inline constexpr uint32_t kNumValueTypes = 13;
const char* value_type_name(ValueType t);  // "u32", "string", "array", ...

// Limits that keep a hostile file from making us allocate absurd memory or recurse deeply.
// Each is far above what real models use (the largest tokenizers, e.g. 200k tokens + 450k
// merges + 200k token types, hold under 10^6 metadata values). Every Value costs ~100 bytes, so
// kMaxTotalValues caps the parsed metadata near 400 MiB however the file is built.
inline constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
inline constexpr uint64_t kMaxArrayElems = uint64_t{1} << 31;
inline constexpr uint64_t kMaxTotalValues = uint64_t{1} << 22;  // all metadata values together
inline constexpr int kMaxNestingDepth = 8;                      // array of array of ...
inline constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
inline constexpr uint64_t kMaxKeys = uint64_t{1} << 20;
inline constexpr uint32_t kDefaultAlignment = 32;
// Real files use 32 or 64; a cap keeps a hostile alignment from making a rewrite pad gigabytes.
inline constexpr uint32_t kMaxAlignment = uint32_t{1} << 20;

// One metadata value. Unsigned integers live in |u|, signed in |i|, f32/f64 in |f|.
// An array's elements all have |array_type| (arrays may nest up to kMaxNestingDepth).
struct Value {
  ValueType type = ValueType::kU8;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  ValueType array_type = ValueType::kU8;
  std::vector<Value> array;

  static Value of_uint(ValueType t, uint64_t v);  // kU8/kU16/kU32/kU64
  static Value of_int(ValueType t, int64_t v);    // kI8/kI16/kI32/kI64
  static Value of_float(ValueType t, double v);   // kF32/kF64
  static Value of_bool(bool v);
  static Value of_string(std::string v);
  static Value of_array(ValueType elem, std::vector<Value> elems);

  bool is_integer() const;
  bool is_float() const { return type == ValueType::kF32 || type == ValueType::kF64; }
  bool operator==(const Value& o) const;
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, 4> shape{};  // OUTERMOST FIRST: token_embd is [n_vocab, n_embd]
  uint64_t offset = 0;             // absolute byte offset of the data in the file
  uint64_t nbytes = 0;
  int64_t elements() const;
};

class File {
 public:
  // Maps |path| read-only and validates everything (magic, version 2 or 3, counts, string and
  // array lengths, nesting depth, value types, tensor dtypes/shapes/offsets/sizes/alignment,
  // overlaps, data within the file). Errors name the file, the field and the problem.
  static Result<std::shared_ptr<File>> open(const std::string& path);
  // The same over bytes already in memory (fuzzing, embedded models). Does not copy: |data| must
  // outlive the File and every pointer it hands out. |name| stands in for the path in messages.
  static Result<std::shared_ptr<File>> open_memory(const void* data, size_t size,
                                                   std::string name);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }  // file order
  const Value* find(std::string_view key) const;

  // Typed getters: NotFound if absent, InvalidArgument naming key and actual type if mistyped.
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;     // any integer type (u64 range-checked)
  Result<double> get_float(std::string_view key) const;    // f32/f64 (and integers)
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  Result<std::vector<double>> get_float_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const void* tensor_data(const TensorInfo& t) const { return base_ + t.offset; }
  std::shared_ptr<const void> mapping() const { return mapping_; }  // keeps the mapping alive
  size_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section

 private:
  File() = default;
  static Result<std::shared_ptr<File>> parse(std::shared_ptr<const void> mapping, size_t size,
                                             std::string path);
  Result<const Value*> lookup(std::string_view key) const;

  friend class Parser;
  std::string path_;
  std::shared_ptr<const void> mapping_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<TensorInfo> tensors_;
};

// Builds a GGUF v3 file in memory and writes it out. Keys keep insertion order; adding a key
// that exists replaces its value in place.
class Writer {
 public:
  void set_alignment(uint32_t a);  // default 32, power of two <= kMaxAlignment; written as
                                   // general.alignment when set
  void add(std::string key, Value v);
  void add_string(std::string key, std::string v);
  void add_u32(std::string key, uint32_t v);
  void add_i32(std::string key, int32_t v);
  void add_f32(std::string key, float v);
  void add_bool(std::string key, bool v);
  void add_u64(std::string key, uint64_t v);
  void add_string_array(std::string key, std::vector<std::string> v);
  void add_i32_array(std::string key, std::vector<int32_t> v);
  void add_f32_array(std::string key, std::vector<float> v);

  // |shape| outermost first; |data| is dtype_row_bytes(dtype, shape.back()) * rows bytes, copied.
  // Rejects duplicate names, ranks outside 1..4, dims < 1, partial blocks and a wrong |nbytes|.
  Status add_tensor(std::string name, DType dtype, std::vector<int64_t> shape, const void* data,
                    size_t nbytes);

  // The whole file's bytes; fails only on a malformed Value (array elements of the wrong type,
  // nesting too deep).
  Result<std::vector<uint8_t>> serialize() const;
  Status write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
  };
  uint32_t alignment_ = kDefaultAlignment;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace tessera::gguf

// safetensors: Hugging Face's tensor file format, and checkpoints made of such files.
//
// File layout (little endian): u64 N, then N bytes of UTF-8 JSON (the header), then the data.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets
// relative to the first byte after the header; "__metadata__" holds string pairs. A File maps
// one .safetensors read-only and validates the header completely up front (JSON, dtypes, shapes,
// byte counts, offsets within the file, overlaps), so every pointer it hands out can be trusted.
//
// A Checkpoint is a directory: config.json, one model.safetensors or shards listed by
// model.safetensors.index.json ("weight_map": tensor name -> shard file), tokenizer files.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace tessera::safetensors {

// Element types of the format (the header spells them "F32", "BF16", "F8_E4M3", ...).
enum class StDType : uint8_t {
  kBool, kU8, kI8, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64,
  kF8_E4M3, kF8_E5M2, kF8_E8M0,
};
const char* st_dtype_name(StDType t);
int st_dtype_size(StDType t);  // bytes per element

// Limits against hostile headers; far above real checkpoints (the format's own header cap is
// 100 MB; a 400B-parameter model's shard holds a few thousand tensors).
inline constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
inline constexpr int kMaxRank = 8;

struct TensorInfo {
  std::string name;
  StDType dtype = StDType::kF32;
  std::vector<int64_t> shape;  // outermost first, as torch writes it
  uint64_t offset = 0;         // absolute byte offset of the data in the file
  uint64_t nbytes = 0;
  int64_t numel() const;
  std::string shape_string() const;  // "[576, 1536] BF16"
};

class File {
 public:
  static Result<std::shared_ptr<File>> open(const std::string& path);
  // The same over bytes in memory (tests, fuzzing); |data| must outlive the File.
  static Result<std::shared_ptr<File>> open_memory(const void* data, size_t size, std::string name);

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // header order
  const TensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const uint8_t* data(const TensorInfo& t) const { return base_ + t.offset; }
  const uint8_t* base() const { return base_; }
  size_t size() const { return size_; }
  std::shared_ptr<const void> mapping() const { return mapping_; }  // keeps the bytes alive

 private:
  File() = default;
  static Result<std::shared_ptr<File>> parse(std::shared_ptr<const void> mapping, size_t size, std::string path);
  Status parse_header();

  std::string path_;
  std::shared_ptr<const void> mapping_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// One tensor of a checkpoint: the shard that holds it and its header entry.
struct TensorRef {
  const File* file = nullptr;
  const TensorInfo* info = nullptr;
  const uint8_t* data() const { return file->data(*info); }
};

class Checkpoint {
 public:
  // Opens |dir|: model.safetensors.index.json if present (every shard it names must exist and
  // hold the tensors the index puts there), else every *.safetensors file in the directory.
  // A tensor name found in two shards is an error.
  static Result<std::unique_ptr<Checkpoint>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::vector<std::shared_ptr<File>>& files() const { return files_; }
  // nullptr-file ref when absent.
  TensorRef find(std::string_view name) const;
  bool has(std::string_view name) const { return find(name).file != nullptr; }
  // Every tensor name, sorted (for messages and tools).
  std::vector<std::string> names() const;

 private:
  std::string dir_;
  std::vector<std::shared_ptr<File>> files_;
  std::unordered_map<std::string, TensorRef> index_;
};

// Whether |path| is a directory holding a Hugging Face checkpoint (config.json).
bool is_checkpoint_dir(const std::string& path);

}  // namespace tessera::safetensors

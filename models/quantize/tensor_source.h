// TensorSource: where `tessera quantize` reads a model from. The quantizer sees only this
// interface (names, shapes, dtypes, rows decoded to f32, GGUF-style metadata), so any checkpoint
// format becomes a GGUF once it can present itself this way.
//
// A source speaks GGUF's vocabulary: tensor names as the loaders expect them
// ("blk.3.attn_q.weight"), shapes outermost first, and metadata under GGUF keys
// ("llama.block_count", "tokenizer.ggml.tokens"). A safetensors source translates HF names and
// config.json / tokenizer.json into these; see docs/quant.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "models/gguf/gguf.h"
#include "quant/dtype.h"

namespace tessera {

struct SourceTensor {
  std::string name;
  DType dtype = DType::kF32;     // as stored; rows are decoded to f32 whatever it is
  std::vector<int64_t> shape;    // OUTERMOST FIRST; shape.back() is the row length
  int64_t cols() const { return shape.back(); }
  int64_t rows() const;          // product of all but the last dimension (1 for a 1-D tensor)
};

using MetadataList = std::vector<std::pair<std::string, gguf::Value>>;

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The file or folder it reads, for messages.
  virtual const std::string& path() const = 0;
  virtual const std::vector<SourceTensor>& tensors() const = 0;
  // GGUF keys in the order they should be written. The quantizer rewrites general.file_type,
  // general.quantization_version and general.alignment itself.
  virtual const MetadataList& metadata() const = 0;
  // Decodes rows [row0, row0 + n) of tensors()[index] into |out| (n * cols floats).
  // Must be safe to call from several threads at once (the quantizer splits a tensor's rows).
  // Errors name the file and the tensor. Integer tensors (i8, i32) cannot be decoded: they are
  // copied with raw_rows instead.
  virtual Status read_rows(size_t index, int64_t row0, int64_t n, float* out) const = 0;
  // The stored bytes of a whole tensor, for tensors copied unchanged (nullptr if the source has
  // no such bytes; the quantizer then re-encodes from read_rows).
  virtual const void* raw_data(size_t /*index*/) const { return nullptr; }
};

// A GGUF file as a source: every tensor dtype the reader accepts, dequantised with the
// quant/ reference.
Result<std::unique_ptr<TensorSource>> open_gguf_source(const std::string& path);

}  // namespace tessera

// A Hugging Face checkpoint directory -> one GGUF file (`tessera convert`), or a TensorSource for
// `tessera quantize`.
#pragma once
#include <functional>
#include <string>

#include "core/status.h"
#include "models/quantize/tensor_source.h"

namespace tessera::safetensors {

// GGUF's llama/mistral q/k rows are in adjacent-pair rope order (llama.cpp's converter permutes
// HF's rotate-half rows): row |row| of the GGUF tensor is HF row gguf_rope_source_row(row), for
// heads of |head_dim| rows.
inline int64_t gguf_rope_source_row(int64_t row, int64_t head_dim) {
  const int64_t h = row / head_dim, i = (row % head_dim) / 2, j = row % 2;
  return h * head_dim + j * head_dim / 2 + i;
}

struct ConvertOptions {
  std::function<void(const std::string& tensor)> progress;  // after each tensor is added
};

// Writes |out_path| with the config as {arch}.* keys, the tokenizer as tokenizer.ggml.*, the
// chat template, and every tensor under its GGUF name, in the dtype it loads as (float, MXFP4,
// and FP8/INT4 under Tessera's own GGUF type ids); NVFP4 with a global scale is refused. llama/mistral q/k
// rows are permuted into GGUF's rope order, so the file loads with RopeMode::kNormal and gives
// the checkpoint's logits. phi3 keeps its fused attn_qkv / ffn_up whole and writes both longrope
// factor lists (rope_factors_long/short) and the phi3.rope.scaling.* / attention.sliding_window
// keys, as llama.cpp's converter does.
Status convert_to_gguf(const std::string& dir, const std::string& out_path, const ConvertOptions& opts = {});

// The checkpoint as a `tessera quantize` source: GGUF tensor names, metadata ({arch}.*,
// tokenizer.ggml.*, the chat template) and llama/mistral q/k rows in GGUF's rope order. Rows
// decode from any form the loader reads (F32/F16/BF16 and the quantised ones).
Result<std::unique_ptr<TensorSource>> open_safetensors_source(const std::string& dir);

}  // namespace tessera::safetensors

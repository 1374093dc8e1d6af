// Model quantisation: a TensorSource (a GGUF file today) becomes a GGUF file whose weights are in
// a chosen format, tensor by tensor under llama.cpp-style rules. `tessera quantize` is a thin
// front end over plan_quantization + quantize_model.
//
// Rules, first match wins:
//   1. integer tensors (i8, i32) are copied unchanged;
//   2. user rules ('regex=type', regex searched in the tensor name, in the order given); a rule
//      naming a block format skips 1-D tensors and biases;
//   3. 1-D tensors (norms, biases, rope factors) and biases of any rank (gpt-oss's per-expert
//      [E, N] ones, which matmul_id adds in float) stay f32;
//   4. MoE routers (ffn_gate_inp) stay f32: small, and routing is sensitive to them;
//   5. token_embd.weight takes the embedding type and output.weight the output type; a tied
//      token_embd (no output.weight) is the output head too and takes the output type;
//   6. everything else takes the target type.
// A type whose block does not divide the row length falls back along fallback_types() to the
// first that fits; the plan records it and says why.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "models/quantize/calibrate.h"
#include "models/quantize/tensor_source.h"

namespace tessera {

struct QuantRule {
  std::string text;  // as given: "attn_v=q8_0"
  std::regex pattern;
  DType dtype = DType::kF32;
};
// Parses "REGEX=TYPE" (the last '=' splits, so the regex may contain '='). Errors name the rule.
Result<QuantRule> parse_quant_rule(const std::string& text);

// A weight format by name, case-insensitive ("Q4_K", "q4_k", "F32"); errors list the valid names.
Result<DType> parse_weight_type(const std::string& name);

struct QuantizeOptions {
  DType type = DType::kQ8_0;
  std::optional<DType> embed_type;   // default: default_high_type(type)
  std::optional<DType> output_type;  // default: default_high_type(type)
  std::vector<QuantRule> rules;
  int threads = 0;  // 0: all hardware threads
  // Calibration statistics (collect_calibration); when set, every tensor they cover whose target
  // is a quantised format is written with GPTQ instead of round-to-nearest (uses_gptq).
  const CalibrationStats* calib = nullptr;
  // (elements done, elements total) after each chunk of rows; called from one thread at a time.
  std::function<void(int64_t, int64_t)> progress;
};

// The type the embedding and output head get by default: the target itself when it has 8 bits
// per weight or more, else q8_0 (llama.cpp's mixes keep these tensors at 6-8 bits because their
// error reaches every token's logits directly); f16 for the fp8 targets, as FP8 checkpoints keep
// embed_tokens and lm_head in 16 bits.
DType default_high_type(DType target);
// Types tried, in order, when |t|'s block size does not divide a row: the nearest formats of at
// least the same accuracy with smaller blocks, ending in f16 (block 1, always fits).
std::vector<DType> fallback_types(DType t);
// Storage bits per weight of a block format (row headers excluded).
double bits_per_weight(DType t);
// llama.cpp's general.file_type (LLAMA_FTYPE_*) for a target type, or nullopt when it has none.
std::optional<uint32_t> llama_file_type(DType t);

struct TensorPlan {
  size_t index = 0;        // into source.tensors()
  std::string name;
  std::vector<int64_t> shape;
  DType from = DType::kF32;
  DType wanted = DType::kF32;  // what the rules chose
  DType to = DType::kF32;      // what is written (wanted, or its fallback)
  std::string reason;          // which rule chose |wanted|
  std::string fallback;        // empty, or why |to| differs from |wanted|
  int64_t out_bytes = 0;
};

Result<std::vector<TensorPlan>> plan_quantization(const TensorSource& src, const QuantizeOptions& o);

// Whether quantize_model writes |p| with GPTQ: o.calib has its input statistics, its target is a
// quantised format, and it is not token_embd.weight. A (tied) embedding table is also read by
// row lookup, where GPTQ's trade of error between columns does not pay, so it stays
// round-to-nearest.
bool uses_gptq(const TensorPlan& p, const QuantizeOptions& o);

struct QuantizeStats {
  int64_t bytes_out = 0;  // the whole output file
  int gptq_tensors = 0;   // written with GPTQ
  double seconds = 0;
};

// Runs |plan| over |src| and writes |out_path| (through a temporary file renamed at the end, so a
// failure never leaves a truncated model). Refuses to overwrite the input. Rows are split across
// o.threads threads; every decoded value must be finite.
Result<QuantizeStats> quantize_model(const TensorSource& src, const std::vector<TensorPlan>& plan,
                                     const QuantizeOptions& o, const std::string& out_path);

}  // namespace tessera

// The per-tensor rules of `tessera quantize`: which format each tensor gets, and why.
#include <algorithm>
#include <cctype>

#include "models/quantize/quantize.h"

namespace tessera {

Result<DType> parse_weight_type(const std::string& name) {
  std::string lower = name;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  const auto t = dtype_from_name(lower);
  if (t && dtype_traits(*t).quantize_row && dtype_traits(*t).gguf_type >= 0) return *t;
  std::string valid;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DTypeTraits& tr = dtype_table()[i];
    if (tr.quantize_row && tr.gguf_type >= 0) valid += std::string(valid.empty() ? "" : ", ") + tr.name;
  }
  return InvalidArgument("unknown weight type '" + name + "' (valid: " + valid + ")");
}

Result<QuantRule> parse_quant_rule(const std::string& text) {
  const size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return InvalidArgument("rule '" + text + "': expected REGEX=TYPE, e.g. 'attn_v=q8_0'");
  QuantRule r;
  r.text = text;
  auto t = parse_weight_type(text.substr(eq + 1));
  if (!t.ok()) return t.status().with_context("rule '" + text + "': ");
  r.dtype = *t;
  try {
    r.pattern = std::regex(text.substr(0, eq), std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    return InvalidArgument("rule '" + text + "': bad regex '" + text.substr(0, eq) + "': " + e.what());
  }
  return r;
}

double bits_per_weight(DType t) {
  const DTypeTraits& tr = dtype_traits(t);
  return double(tr.block_bytes) * 8.0 / double(tr.block_elems);
}

DType default_high_type(DType target) {
  // FP8 checkpoints (HF, vLLM) keep embed_tokens and lm_head in 16 bits; on SmolLM2 the fp8 head
  // alone costs +1.5 % perplexity (docs/quant.md).
  if (target == DType::kFP8_E4M3 || target == DType::kFP8_E5M2) return DType::kF16;
  return bits_per_weight(target) >= 8.0 ? target : DType::kQ8_0;
}

std::vector<DType> fallback_types(DType t) {
  switch (t) {
    // As llama.cpp falls back for k-quants: one step up in bits, in 32-element blocks.
    case DType::kQ4_K: return {DType::kQ5_0, DType::kQ8_0, DType::kF16};
    case DType::kQ5_K: return {DType::kQ5_1, DType::kQ8_0, DType::kF16};
    case DType::kQ6_K: return {DType::kQ8_0, DType::kF16};
    case DType::kNVFP4: return {DType::kQ5_0, DType::kQ8_0, DType::kF16};
    case DType::kINT4_G128: return {DType::kINT4_G64, DType::kINT4_G32, DType::kF16};
    case DType::kINT4_G64: return {DType::kINT4_G32, DType::kF16};
    default: return {DType::kF16};
  }
}

std::optional<uint32_t> llama_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ4_K: return 14;  // Q4_K_S: mostly q4_k, as our mix is
    case DType::kQ5_K: return 16;  // Q5_K_S
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    case DType::kMXFP4: return 38;
    case DType::kNVFP4: return 39;
    default: return std::nullopt;
  }
}

namespace {

bool fits(DType t, int64_t cols) { return dtype_row_check(t, cols).empty(); }

// Rules 1-6 of quantize.h: the type the rules want for |s|, and which rule chose it.
std::pair<DType, std::string> wanted_type(const SourceTensor& s, const QuantizeOptions& o, bool tied) {
  const bool one_d = s.shape.size() == 1;
  const std::string suffix = ".bias";
  const bool bias =
      s.name.size() >= suffix.size() && s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  if (!dtype_traits(s.dtype).dequantize_row) return {s.dtype, "integer tensor, copied"};
  for (const QuantRule& r : o.rules) {
    if (!std::regex_search(s.name, r.pattern)) continue;
    if ((one_d || bias) && !dtype_traits(r.dtype).is_float) continue;  // 1-D tensors and biases must stay float
    return {r.dtype, "rule '" + r.text + "'"};
  }
  if (one_d) return {DType::kF32, "1-D (norm/bias)"};
  if (bias) return {DType::kF32, "bias"};
  if (s.name.find("ffn_gate_inp") != std::string::npos) return {DType::kF32, "MoE router"};
  const DType high_out = o.output_type.value_or(default_high_type(o.type));
  if (s.name == "token_embd.weight") {
    if (tied) return {high_out, "token embedding, tied to the output head"};
    return {o.embed_type.value_or(default_high_type(o.type)), "token embedding"};
  }
  if (s.name == "output.weight") return {high_out, "output head"};
  return {o.type, "target type"};
}

}  // namespace

Result<std::vector<TensorPlan>> plan_quantization(const TensorSource& src, const QuantizeOptions& o) {
  const auto& tensors = src.tensors();
  if (tensors.empty()) return InvalidArgument(src.path() + ": has no tensors");
  const bool tied = std::none_of(tensors.begin(), tensors.end(),
                                 [](const SourceTensor& s) { return s.name == "output.weight"; });
  std::vector<TensorPlan> plan;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SourceTensor& s = tensors[i];
    if (s.shape.empty() || s.shape.size() > 4)
      return InvalidArgument(src.path() + ": tensor '" + s.name + "' has rank " + std::to_string(s.shape.size()));
    TensorPlan p;
    p.index = i;
    p.name = s.name;
    p.shape = s.shape;
    p.from = s.dtype;
    std::tie(p.wanted, p.reason) = wanted_type(s, o, tied);
    p.to = p.wanted;
    if (!fits(p.to, s.cols())) {
      for (DType f : fallback_types(p.wanted)) {
        if (!fits(f, s.cols())) continue;
        p.to = f;
        break;
      }
      p.fallback = "row of " + std::to_string(s.cols()) + " is not a multiple of " + dtype_name(p.wanted) + "'s block of " +
                   std::to_string(dtype_traits(p.wanted).block_elems) + ", using " + dtype_name(p.to);
    }
    p.out_bytes = dtype_row_bytes(p.to, s.cols()) * s.rows();
    plan.push_back(std::move(p));
  }
  return plan;
}

}  // namespace tessera

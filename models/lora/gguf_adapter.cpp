// llama.cpp's GGUF LoRA adapters, as its convert_lora_to_gguf.py writes them: metadata
// general.type "adapter", general.architecture (the base model's), adapter.type "lora" and
// adapter.lora.alpha (f32); tensors named after the base weight they add to,
// "<base>.lora_a" [r, K] and "<base>.lora_b" [N, r] (row-major; ggml's ne lists them reversed).
// The converter writes them against the GGUF base, so q/k rows are already in GGUF's rope order;
// only a model loaded from a Hugging Face folder (HF row order) needs them permuted back.
#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "models/arch/architecture.h"
#include "models/gguf/gguf.h"
#include "models/lora/lora.h"

namespace tessera {

namespace {

constexpr std::string_view kSuffixA = ".lora_a", kSuffixB = ".lora_b";

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A string key's value, or "" when absent (llama.cpp reads absent keys as empty).
Result<std::string> string_key(const gguf::File& f, std::string_view key) {
  if (!f.find(key)) return std::string();
  return f.get_string(key);
}

// The metadata llama.cpp checks before it reads a tensor, in its order: what kind of file this is,
// the architecture, the adapter kind. Empty when the file is a plain LoRA adapter for |arch|.
Result<std::string> metadata_problem(const gguf::File& f, const std::string& arch) {
  TS_ASSIGN_OR_RETURN(const std::string type, string_key(f, "general.type"));
  TS_ASSIGN_OR_RETURN(const std::string file_arch, string_key(f, "general.architecture"));
  if (file_arch == "controlvector") return std::string("a control vector, not a LoRA adapter (not supported)");
  if (type != "adapter")
    return (type.empty() ? std::string("general.type is missing") : "general.type is '" + type + "'") +
           ", not 'adapter': a model or another kind of GGUF, not a LoRA adapter";
  if (file_arch != arch)
    return "an adapter for architecture '" + file_arch + "', but the model is " + arch +
           " (an adapter for another architecture)";
  TS_ASSIGN_OR_RETURN(const std::string adapter_type, string_key(f, "adapter.type"));
  if (adapter_type != "lora") return "adapter.type is '" + adapter_type + "', not 'lora' (not supported)";
  return std::string();
}

// An adapter module's two tensors (either may be missing: the caller says which).
struct GgufHalves {
  const gguf::TensorInfo *a = nullptr, *b = nullptr;
};

// The lora_a / lora_b tensors of |f| by base tensor name. A trained norm weight (mergekit's
// extracted LoRAs carry them; llama.cpp ignores them) is refused rather than dropped, as PEFT's
// modules_to_save are: the fine-tune would not be what runs.
Result<std::map<std::string, GgufHalves>> pair_gguf_tensors(const gguf::File& f) {
  std::map<std::string, GgufHalves> pairs;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (ends_with(t.name, kSuffixA)) {
      pairs[t.name.substr(0, t.name.size() - kSuffixA.size())].a = &t;
    } else if (ends_with(t.name, kSuffixB)) {
      pairs[t.name.substr(0, t.name.size() - kSuffixB.size())].b = &t;
    } else if (ends_with(t.name, "_norm.weight")) {
      return Unimplemented("tensor '" + t.name +
                           "' is a trained norm weight (as mergekit-extract-lora writes): not supported");
    } else {
      return InvalidArgument("tensor '" + t.name + "' is neither <base tensor>.lora_a nor <base tensor>.lora_b");
    }
  }
  return pairs;
}

std::string shape_string(const gguf::TensorInfo& t) {
  std::string s = "[";
  for (int d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.shape[size_t(d)]);
  return s + "]";
}

// The tensor's values as f32, row-major: the dtypes convert_lora_to_gguf.py writes.
Result<std::vector<float>> gguf_to_f32(const gguf::File& f, const gguf::TensorInfo& t) {
  if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16 && t.dtype != DType::kQ8_0)
    return InvalidArgument("tensor '" + t.name + "' is " + dtype_name(t.dtype) + " (f32, f16, bf16 or q8_0 expected)");
  const int64_t cols = t.shape[size_t(t.rank - 1)], rows = t.elements() / cols;
  const int64_t row_bytes = dtype_row_bytes(t.dtype, cols);
  const auto* src = static_cast<const uint8_t*>(f.tensor_data(t));
  std::vector<float> out(size_t(t.elements()));
  for (int64_t r = 0; r < rows; ++r)
    dtype_traits(t.dtype).dequantize_row(src + r * row_bytes, out.data() + r * cols, cols);
  return out;
}

// "attn_q" of "blk.3.attn_q.weight": the adapter's target modules in GGUF's own names.
std::string tensor_stem(const std::string& name) {
  std::string s = name;
  if (s.rfind("blk.", 0) == 0)
    if (const size_t dot = s.find('.', 4); dot != std::string::npos) s = s.substr(dot + 1);
  if (ends_with(s, ".weight")) s.resize(s.size() - 7);
  return s;
}

// Checks every pair against its base weight and the adapter's one rank, and stores it in |a|
// (a->rank: the rank of the first pair).
Status read_gguf_pairs(const std::string& who, const gguf::File& f, const std::map<std::string, GgufHalves>& pairs,
                       const Architecture& arch, const ModelConfig& cfg, const std::vector<LoraTarget>& targets,
                       LoraAdapter* a) {
  auto bad = [&who](const std::string& m) { return InvalidArgument(who + ": " + m); };
  std::map<std::string, const LoraTarget*> by_name;
  std::vector<DType> seen;  // every tensor's dtype (LoraAdapter::dtype)
  for (const LoraTarget& t : targets) by_name[t.name] = &t;
  // The file's q/k rows are in GGUF's order; a model loaded from an HF folder keeps HF's.
  const bool unpermute = arch.gguf_rope_rows_permuted(cfg) && cfg.rope.mode != RopeMode::kNormal;
  for (const auto& [base, h] : pairs) {
    if (base == "token_embd.weight" || base == "output.weight")
      return Unimplemented(who + ": '" + base + "': LoRA on the token embeddings or the output head is not supported");
    if (!h.a || !h.b) return bad("'" + base + "' has " + (h.a ? "lora_a but no lora_b" : "lora_b but no lora_a"));
    auto it = by_name.find(base);
    if (it == by_name.end())
      return bad("'" + base + "' is not a projection of this " + cfg.arch +
                 " model (an adapter for another model, or a weight LoRA is not supported on: experts, fused "
                 "projections)");
    const LoraTarget& t = *it->second;
    const int64_t r = h.a->shape[0];
    if (h.a->rank != 2 || h.b->rank != 2 || h.a->shape[1] != t.cols || h.b->shape[0] != t.rows || h.b->shape[1] != r)
      return bad("'" + base + "': lora_a is " + shape_string(*h.a) + " and lora_b " + shape_string(*h.b) +
                 ", but the base weight is [" + std::to_string(t.rows) + ", " + std::to_string(t.cols) +
                 "] (want lora_a [r, " + std::to_string(t.cols) + "] and lora_b [" + std::to_string(t.rows) +
                 ", r]: an adapter for another model size?)");
    if (r < 1 || r > kLoraMaxRank)
      return bad("'" + base + "': rank " + std::to_string(r) + " outside [1, " + std::to_string(kLoraMaxRank) + "]");
    if (a->rank == 0) a->rank = int(r);
    if (r != a->rank)
      return Unimplemented(who + ": '" + base + "' has rank " + std::to_string(r) + " and another pair rank " +
                           std::to_string(a->rank) + ": pairs of different ranks in one adapter are not supported");
    LoraPair p;
    p.rows = t.rows;
    p.cols = t.cols;
    for (auto [half, out] : {std::pair{h.a, &p.a}, std::pair{h.b, &p.b}}) {
      auto v = gguf_to_f32(f, *half);
      if (!v.ok()) return bad(v.status().message());
      *out = std::move(*v);
      seen.push_back(half->dtype);
    }
    const bool qk = base.find(".attn_q.") != std::string::npos || base.find(".attn_k.") != std::string::npos;
    if (unpermute && qk) p.b = reorder_rope_rows(p.b, t.rows, r, cfg.head_dim, /*to_gguf=*/false);
    a->modules.emplace(t.weight, std::move(p));
  }
  a->dtype = common_lora_dtype(seen);
  return OkStatus();
}

}  // namespace

Result<LoraAdapter> read_gguf_adapter(const std::string& name, const std::string& path, const Architecture& arch,
                                      const ModelConfig& cfg, const std::vector<LoraTarget>& targets) {
  const std::string who = "adapter '" + name + "' (" + path + ")";
  auto bad = [&who](const std::string& m) { return InvalidArgument(who + ": " + m); };
  auto opened = gguf::File::open(path);  // its errors name the file, the field and the problem
  if (!opened.ok()) return opened.status().with_context("adapter '" + name + "': ");
  const gguf::File& f = **opened;
  auto problem = metadata_problem(f, cfg.arch);
  if (!problem.ok()) return problem.status().with_context("adapter '" + name + "': ");
  if (!problem->empty()) return bad(*problem);
  if (f.find("adapter.alora.invocation_tokens"))
    return Unimplemented(who +
                         ": an activated LoRA (adapter.alora.invocation_tokens: it applies only after "
                         "its invocation tokens) is not supported");
  LoraAdapter a;
  a.name = name;
  a.path = path;
  if (f.find("adapter.lora.alpha")) {
    auto alpha = f.get_float("adapter.lora.alpha");
    if (!alpha.ok()) return alpha.status().with_context("adapter '" + name + "': ");
    a.alpha = *alpha;
  }
  auto paired = pair_gguf_tensors(f);
  if (!paired.ok()) return Status(paired.status().code(), who + ": " + paired.status().message());
  if (paired->empty()) return bad("holds no .lora_a/.lora_b tensors");
  TS_RETURN_IF_ERROR(read_gguf_pairs(who, f, *paired, arch, cfg, targets, &a));
  std::set<std::string> stems;
  for (const auto& [base, halves] : *paired) stems.insert(tensor_stem(base));
  a.target_modules.assign(stems.begin(), stems.end());
  // llama.cpp's scale: alpha / r, or 1 when the file has no alpha (or 0).
  a.scale = a.alpha != 0.0 ? float(a.alpha / double(a.rank)) : 1.0f;
  return a;
}

}  // namespace tessera

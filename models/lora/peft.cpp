// PEFT LoRA adapters: adapter_config.json (peft_type LORA, r, lora_alpha, use_rslora,
// target_modules) and adapter_model.safetensors, whose tensors are named
// base_model.model.<HF module path>.lora_A.weight [r, K] and .lora_B.weight [N, r]. A module path
// is matched to the model's weight through the family's own HF name mapping
// (Architecture::hf_tensor_prefix), so an adapter fits every family whose checkpoints load.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "models/arch/architecture.h"
#include "models/lora/lora.h"
#include "models/safetensors/convert.h"
#include "models/safetensors/json_util.h"
#include "models/safetensors/safetensors.h"
#include "quant/half.h"

namespace tessera {

namespace {
using safetensors::json;

constexpr const char* kPrefix = "base_model.model.";

Status unsupported_config(const safetensors::JsonObject& cfg, std::string* why) {
  auto flag = [&](const char* key) -> Result<bool> { return cfg.get_bool(key, false); };
  TS_ASSIGN_OR_RETURN(const bool dora, flag("use_dora"));
  TS_ASSIGN_OR_RETURN(const bool fifo, flag("fan_in_fan_out"));
  if (dora) *why = "use_dora (DoRA) is not supported";
  if (fifo) *why = "fan_in_fan_out (GPT-2 style Conv1D weights) is not supported";
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (const json* v = cfg.find(key); v && v->is_object() && !v->empty())
      *why = std::string(key) + " (per-module ranks or alphas) is not supported";
  if (const json* v = cfg.find("modules_to_save"); v && v->is_array() && !v->empty())
    *why = "modules_to_save (fully trained modules beside the LoRA pairs) is not supported";
  TS_ASSIGN_OR_RETURN(const std::string bias, cfg.get_string("bias", "none"));
  if (bias != "none") *why = "bias '" + bias + "' (trained biases) is not supported";
  return OkStatus();
}

// The tensor's values as f32, row-major.
Result<std::vector<float>> to_f32(const safetensors::File& f, const safetensors::TensorInfo& t) {
  std::vector<float> out(size_t(t.numel()));
  const uint8_t* p = f.data(t);
  for (size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype) {
      case safetensors::StDType::kF32:
        std::memcpy(&out[i], p + 4 * i, 4);
        break;
      case safetensors::StDType::kF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = fp16_to_f32(h);
        break;
      }
      case safetensors::StDType::kBF16: {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bf16_to_f32(h);
        break;
      }
      default:
        return InvalidArgument(t.name + " is " + safetensors::st_dtype_name(t.dtype) + " (F32, F16 or BF16 expected)");
    }
  }
  return out;
}

// An adapter module's two tensors (either may be missing: the caller says which).
struct Halves {
  const safetensors::TensorInfo *a = nullptr, *b = nullptr;
};

// The lora_A / lora_B tensors of |file| by HF module path (the name without kPrefix and the
// ".lora_A.weight" suffix). Any other tensor is an error naming it.
Result<std::map<std::string, Halves>> pair_tensors(const safetensors::File& file) {
  std::map<std::string, Halves> pairs;
  for (const safetensors::TensorInfo& t : file.tensors()) {
    const std::string& n = t.name;
    std::string module;
    bool a_half = false;
    for (const char* suffix : {".lora_A.weight", ".lora_B.weight"}) {
      const size_t sl = std::strlen(suffix);
      if (n.size() > sl && n.compare(n.size() - sl, sl, suffix) == 0) {
        module = n.substr(0, n.size() - sl);
        a_half = suffix[6] == 'A';
      }
    }
    if (module.empty())
      return InvalidArgument("tensor '" + n +
                             "' is not a lora_A/lora_B weight (embedding adapters, DoRA magnitudes and trained "
                             "biases are not supported)");
    if (module.rfind(kPrefix, 0) != 0)
      return InvalidArgument("tensor '" + n + "' does not start with '" + kPrefix + "'");
    module = module.substr(std::strlen(kPrefix));
    (a_half ? pairs[module].a : pairs[module].b) = &t;
  }
  return pairs;
}
}  // namespace

namespace {
// adapter_config.json of |dir| into |a|: rank, alpha, rsLoRA and the scale they give, target
// modules; errors name |who|.
Status read_adapter_config(const std::string& dir, const std::string& who, LoraAdapter* a) {
  auto bad = [&who](const std::string& m) { return InvalidArgument(who + ": " + m); };
  const std::string cfg_path = dir + "/adapter_config.json";
  auto parsed = safetensors::read_json_file(cfg_path);
  if (!parsed.ok()) return Status(parsed.status().code(), who + ": " + parsed.status().message());
  if (!parsed->is_object()) return bad("adapter_config.json is not a JSON object");
  const safetensors::JsonObject c(*parsed, cfg_path);
  TS_ASSIGN_OR_RETURN(const std::string peft_type, c.get_string("peft_type", "LORA"));
  if (peft_type != "LORA") return bad("peft_type '" + peft_type + "' is not LORA");
  std::string why;
  TS_RETURN_IF_ERROR(unsupported_config(c, &why));
  if (!why.empty()) return bad(why);
  TS_ASSIGN_OR_RETURN(a->rank, c.get_int32("r"));
  TS_ASSIGN_OR_RETURN(a->alpha, c.get_float("lora_alpha", double(a->rank)));
  TS_ASSIGN_OR_RETURN(a->rslora, c.get_bool("use_rslora", false));
  if (a->rank < 1 || a->rank > kLoraMaxRank)
    return bad("rank r = " + std::to_string(a->rank) + " outside [1, " + std::to_string(kLoraMaxRank) + "]");
  a->scale = float(a->rslora ? a->alpha / std::sqrt(double(a->rank)) : a->alpha / double(a->rank));
  if (const json* t = c.find("target_modules")) {
    if (t->is_string()) a->target_modules.push_back(t->get<std::string>());
    if (t->is_array())
      for (const json& e : *t)
        if (e.is_string()) a->target_modules.push_back(e.get<std::string>());
  }
  return OkStatus();
}
}  // namespace

Result<LoraAdapter> read_peft_adapter(const std::string& name, const std::string& dir, const Architecture& arch,
                                      const ModelConfig& cfg, const std::vector<LoraTarget>& targets) {
  const std::string who = "adapter '" + name + "' (" + dir + ")";
  auto bad = [&who](const std::string& m) { return InvalidArgument(who + ": " + m); };
  LoraAdapter a;
  a.name = name;
  a.path = dir;
  TS_RETURN_IF_ERROR(read_adapter_config(dir, who, &a));

  const std::string st_path = dir + "/adapter_model.safetensors";
  std::error_code ec;
  if (!std::filesystem::exists(st_path, ec)) {
    if (std::filesystem::exists(dir + "/adapter_model.bin", ec))
      return bad("adapter_model.bin (pickled torch) is not read; save the adapter with safe_serialization");
    return NotFound(who + ": adapter_model.safetensors is missing");
  }
  TS_ASSIGN_OR_RETURN(std::shared_ptr<safetensors::File> file, safetensors::File::open(st_path));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<safetensors::Checkpoint> ckpt, safetensors::Checkpoint::open(dir));

  // The model's weights by HF module path.
  std::map<std::string, const LoraTarget*> by_module;
  for (const LoraTarget& t : targets) {
    const std::string hf = arch.hf_tensor_prefix(cfg, t.name, *ckpt);
    if (!hf.empty()) by_module[hf] = &t;
  }
  const bool permuted = arch.gguf_rope_rows_permuted(cfg) && cfg.rope.mode == RopeMode::kNormal;

  auto paired = pair_tensors(*file);
  if (!paired.ok()) return bad(paired.status().message());
  const std::map<std::string, Halves>& pairs = *paired;
  if (pairs.empty()) return bad("adapter_model.safetensors holds no lora_A/lora_B tensors");

  std::vector<DType> seen;  // every tensor's dtype (LoraAdapter::dtype)
  for (const auto& [module, halves] : pairs) {
    auto it = by_module.find(module);
    if (it == by_module.end())
      return bad("module '" + module + "' is not a projection of this " + cfg.arch +
                 " model (an adapter for another architecture, or a module LoRA is not supported on: experts, "
                 "embeddings, fused projections)");
    const LoraTarget& t = *it->second;
    if (!halves.a || !halves.b)
      return bad("module '" + module + "' has " + (halves.a ? "lora_A but no lora_B" : "lora_B but no lora_A"));
    const std::vector<int64_t> want_a = {a.rank, t.cols}, want_b = {t.rows, a.rank};
    if (halves.a->shape != want_a || halves.b->shape != want_b)
      return bad("module '" + module + "': lora_A is " + halves.a->shape_string() + " and lora_B " +
                 halves.b->shape_string() + ", but the base weight " + t.name + " is [" + std::to_string(t.rows) +
                 ", " + std::to_string(t.cols) + "] and r = " + std::to_string(a.rank) + " (want lora_A [" +
                 std::to_string(a.rank) + ", " + std::to_string(t.cols) + "], lora_B [" + std::to_string(t.rows) +
                 ", " + std::to_string(a.rank) + "]: an adapter for another model size?)");
    LoraPair p;
    p.rows = t.rows;
    p.cols = t.cols;
    auto av = to_f32(*file, *halves.a);
    if (!av.ok()) return bad(av.status().message());
    auto bv = to_f32(*file, *halves.b);
    if (!bv.ok()) return bad(bv.status().message());
    p.a = std::move(*av);
    p.b = std::move(*bv);
    for (const safetensors::TensorInfo* half : {halves.a, halves.b})
      seen.push_back(half->dtype == safetensors::StDType::kF16    ? DType::kF16
                     : half->dtype == safetensors::StDType::kBF16 ? DType::kBF16
                                                                  : DType::kF32);
    const bool qk = t.name.find(".attn_q.") != std::string::npos || t.name.find(".attn_k.") != std::string::npos;
    if (permuted && qk) p.b = reorder_rope_rows(p.b, t.rows, a.rank, cfg.head_dim, /*to_gguf=*/true);
    a.modules.emplace(t.weight, std::move(p));
  }
  a.dtype = common_lora_dtype(seen);
  return a;
}

std::vector<float> reorder_rope_rows(const std::vector<float>& b, int64_t rows, int64_t r, int64_t head_dim,
                                     bool to_gguf) {
  std::vector<float> out(b.size());
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t hf = safetensors::gguf_rope_source_row(row, head_dim);
    std::copy_n(b.begin() + (to_gguf ? hf : row) * r, r, out.begin() + (to_gguf ? row : hf) * r);
  }
  return out;
}

}  // namespace tessera

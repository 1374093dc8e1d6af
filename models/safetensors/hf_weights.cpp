// HF tensor names -> ours, and each checkpoint form of a linear weight -> one of our dtypes.
#include "models/safetensors/hf_model.h"

#include <cstring>

#include "models/arch/registry.h"
#include "models/safetensors/hf_names.h"

namespace tessera::safetensors {

// Splits "blk.3.attn_q.weight" into (3, "attn_q", "weight"); false for other names.
bool split_layer_name(const std::string& name, int* layer, std::string* stem, std::string* suffix) {
  if (name.rfind("blk.", 0) != 0) return false;
  const size_t a = name.find('.', 4), b = name.rfind('.');
  if (a == std::string::npos || b <= a) return false;
  const std::string digits = name.substr(4, a - 4);
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *layer = std::stoi(digits);
  *stem = name.substr(a + 1, b - a - 1);
  *suffix = name.substr(b + 1);
  return true;
}

bool split_layer_rest(const std::string& name, int* layer, std::string* rest) {
  if (name.rfind("blk.", 0) != 0) return false;
  const size_t a = name.find('.', 4);
  if (a == std::string::npos || a + 1 >= name.size()) return false;
  const std::string digits = name.substr(4, a - 4);
  if (digits.empty() || digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *layer = std::stoi(digits);
  *rest = name.substr(a + 1);
  return true;
}

Weights::Weights(const Checkpoint& ckpt, const ModelConfig& cfg, QuantConfig quant)
    : ckpt_(ckpt), cfg_(cfg), quant_(std::move(quant)), arch_(ArchRegistry::find(cfg.arch)) {}
Weights::~Weights() = default;

std::string Weights::hf_prefix(const std::string& name) const {
  return arch_ ? arch_->hf_tensor_prefix(cfg_, name, ckpt_) : "";
}

Result<HostTensor> Weights::owned(const TensorSpec& spec, DType dtype, std::vector<uint8_t> bytes, float out_scale) {
  auto block = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  HostTensor h;
  h.dtype = dtype;
  h.shape = spec.shape;
  h.data = block->data();
  h.nbytes = block->size();
  h.region = block->data();
  h.region_bytes = block->size();
  h.out_scale = out_scale;
  h.keepalive = std::shared_ptr<const void>(block, block->data());
  return h;
}

HostTensor owned_f32(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  if (!bytes.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  auto block = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  HostTensor h;
  h.dtype = DType::kF32;
  h.shape = {int64_t(values.size())};
  h.data = h.region = block->data();
  h.nbytes = h.region_bytes = block->size();
  h.keepalive = std::shared_ptr<const void>(block, block->data());
  return h;
}

Result<std::optional<HostTensor>> Weights::get(const TensorSpec& spec) {
  if (spec.name == "rope_freqs.weight" || spec.name == "rope_factors_long.weight" || spec.name == "rope_factors_short.weight") {
    // Not checkpoint tensors: derived from config.json's rope_scaling (llama3; phi3's longrope,
    // whose chosen factors the config reader kept), if any.
    const std::vector<float>& f = cfg_.rope_freq_factors;
    if (f.empty()) return std::optional<HostTensor>();
    if (int64_t(f.size()) != spec.shape[0])
      return Internal("rope_freqs: " + std::to_string(f.size()) + " factors for " + std::to_string(spec.shape[0]) + " frequencies");
    return std::optional<HostTensor>(owned_f32(f));
  }
  if (HfTensor rule; arch_ && arch_->hf_tensor(cfg_, spec, ckpt_, &rule)) {
    TS_ASSIGN_OR_RETURN(auto h, load_rule(rule, spec));
    if (!h && spec.required) return missing(spec, rule.name);
    return h;
  }
  int l = 0;
  std::string stem, suffix;
  if (split_layer_name(spec.name, &l, &stem, &suffix) && stem.size() > 5 && stem.compare(stem.size() - 5, 5, "_exps") == 0) {
    // Experts: one HF module per expert, stacked into [E, rows, cols].
    const std::string proj = stem.substr(0, stem.size() - 5);  // ffn_gate / ffn_up / ffn_down
    std::vector<std::string> prefixes;
    for (int e = 0; e < cfg_.n_experts; ++e)
      if (arch_) prefixes.push_back(arch_->hf_expert_prefix(cfg_, l, proj, e, ckpt_));
    return load_stacked(prefixes, spec);
  }
  if (spec.fused_rows > 0) return load_fused_rows(spec);
  const std::string prefix = hf_prefix(spec.name);
  if (prefix.empty()) return InvalidArgument("no Hugging Face name for tensor '" + spec.name + "'");
  const std::string sfx = spec.name.substr(spec.name.rfind('.') + 1);
  TS_ASSIGN_OR_RETURN(auto h, load_linear(prefix, sfx, spec));
  if (!h && spec.required) return missing(spec, prefix + "." + sfx);
  return h;
}

Status Weights::missing(const TensorSpec& spec, const std::string& hf_name) const {
  return NotFound(ckpt_.dir() + ": tensor '" + spec.name + "' is missing (checkpoint tensor '" + hf_name +
                  "', architecture " + cfg_.arch + ")");
}

// A row range of a fused projection (phi3: qkv_proj, gate_up_proj): the whole tensor as stored
// (mapped in place for float weights), narrowed to the spec's rows.
Result<std::optional<HostTensor>> Weights::load_fused_rows(const TensorSpec& spec) {
  const std::string prefix = hf_prefix(spec.name);
  if (prefix.empty()) return InvalidArgument(ckpt_.dir() + ": no Hugging Face name for fused tensor '" + spec.name + "'");
  TensorSpec whole = spec;
  whole.shape[0] = spec.fused_rows;
  whole.fused_rows = whole.row_begin = 0;
  TS_ASSIGN_OR_RETURN(auto h, load_linear(prefix, "weight", whole));
  if (!h) return h;
  const int64_t row_bytes = dtype_row_bytes(h->dtype, spec.shape[1]);
  h->data = static_cast<const uint8_t*>(h->data) + spec.row_begin * row_bytes;
  h->nbytes = size_t(spec.shape[0] * row_bytes);
  h->shape = spec.shape;
  return h;
}

Result<std::optional<HostTensor>> Weights::load_stacked(const std::vector<std::string>& prefixes, const TensorSpec& spec) {
  TensorSpec one = spec;
  one.shape.erase(one.shape.begin());
  std::vector<uint8_t> all;
  DType dtype = DType::kF32;
  for (size_t e = 0; e < prefixes.size(); ++e) {
    TS_ASSIGN_OR_RETURN(auto t, load_linear(prefixes[e], "weight", one));
    if (!t && e == 0) return std::optional<HostTensor>();
    if (!t) return NotFound(ckpt_.dir() + ": tensor '" + prefixes[e] + ".weight' is missing");
    // t is in one.shape: load_linear checks every stored form against it.
    if (e == 0) dtype = t->dtype;
    if (t->dtype != dtype)
      return InvalidArgument(ckpt_.dir() + ": expert '" + prefixes[e] + "' is " + dtype_name(t->dtype) + " but expert 0 is " +
                             dtype_name(dtype));
    if (t->out_scale != 1.0f)
      return Unimplemented(ckpt_.dir() + ": '" + prefixes[e] + "': NVFP4 experts with a global scale are not supported");
    const auto* p = static_cast<const uint8_t*>(t->data);
    all.insert(all.end(), p, p + t->nbytes);
  }
  TS_ASSIGN_OR_RETURN(HostTensor h, owned(spec, dtype, std::move(all), 1.0f));
  return std::optional<HostTensor>(std::move(h));
}

}  // namespace tessera::safetensors

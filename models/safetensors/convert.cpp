// A Hugging Face checkpoint directory as GGUF: HfSource (the `tessera quantize` input) and
// `tessera convert`, which writes its tensors unchanged. Float weights keep their dtype
// (F32/F16/BF16), MXFP4 is GGUF type 39, FP8 and INT4 use Tessera's GGUF type ids (quant/dtype.h,
// kTesseraGgufTypeBase: only Tessera reads them); NVFP4 with a global scale is refused by convert
// (GGUF keeps that scale in a separate tensor we do not write; quantize decodes it). llama/mistral
// q/k rows are permuted from HF's rotate-half order into the adjacent-pair order GGUF's llama
// loader expects (RopeMode::kNormal). phi3 is written as llama.cpp's converter writes it: the
// fused qkv_proj / gate_up_proj whole as attn_qkv / ffn_up (no permutation: its GGUF loader uses
// NeoX rope), both longrope factor lists as rope_factors_long/short, and the phi3.* rope and
// window keys.
#include <cstring>
#include <memory>

#include "models/arch/registry.h"
#include "models/gguf/gguf.h"
#include "models/gguf/metadata_builder.h"
#include "models/safetensors/convert.h"
#include "models/safetensors/hf_model.h"

namespace tessera::safetensors {

namespace {

using Meta = gguf::MetadataBuilder;

void add_tokenizer(Meta& w, const TokenizerData& d, const std::string& chat_template) {
  using gguf::Value;
  using gguf::ValueType;
  w.str("tokenizer.ggml.model", d.model);
  if (!d.pre.empty()) w.str("tokenizer.ggml.pre", d.pre);
  w.array("tokenizer.ggml.tokens", ValueType::kString, d.tokens, [](const std::string& t) { return Value::of_string(t); });
  if (!d.scores.empty())
    w.array("tokenizer.ggml.scores", ValueType::kF32, d.scores, [](float x) { return Value::of_float(ValueType::kF32, x); });
  if (!d.token_types.empty())
    w.array("tokenizer.ggml.token_type", ValueType::kI32, d.token_types, [](int32_t x) { return Value::of_int(ValueType::kI32, x); });
  if (!d.merges.empty())
    w.array("tokenizer.ggml.merges", ValueType::kString, d.merges, [](const std::string& t) { return Value::of_string(t); });
  const std::pair<const char*, int32_t> ids[] = {{"tokenizer.ggml.bos_token_id", d.bos},
                                                 {"tokenizer.ggml.eos_token_id", d.eos},
                                                 {"tokenizer.ggml.eot_token_id", d.eot},
                                                 {"tokenizer.ggml.unknown_token_id", d.unk},
                                                 {"tokenizer.ggml.padding_token_id", d.pad}};
  for (const auto& [key, id] : ids)
    if (id >= 0) w.u32(key, id);
  if (d.model == "bert") {  // llama.cpp's names for them
    if (d.bos >= 0) w.u32("tokenizer.ggml.cls_token_id", d.bos);
    if (d.eos >= 0) w.u32("tokenizer.ggml.seperator_token_id", d.eos);
  }
  w.flag("tokenizer.ggml.add_bos_token", d.add_bos);
  w.flag("tokenizer.ggml.add_eos_token", d.add_eos);
  if (d.model == "llama") w.flag("tokenizer.ggml.add_space_prefix", d.add_space_prefix);
  if (!chat_template.empty()) w.str("tokenizer.chat_template", chat_template);
}

}  // namespace

// A checkpoint as a quantizer TensorSource: GGUF names, metadata and rope row order; rows
// decoded from whatever each weight loaded as (float in place, quantised forms repacked).
class HfSource final : public TensorSource {
 public:
  static Result<std::unique_ptr<HfSource>> open(const std::string& dir) {
    std::unique_ptr<HfSource> src(new HfSource());
    src->dir_ = dir;
    QuantConfig quant;
    LongRopeFactors longrope;
    TS_ASSIGN_OR_RETURN(ModelConfig cfg, read_config(dir, &quant, &longrope));
    std::string chat_template;
    TS_ASSIGN_OR_RETURN(TokenizerData tok, read_tokenizer(dir, &chat_template));
    TS_ASSIGN_OR_RETURN(auto ckpt, Checkpoint::open(dir));
    Weights weights(*ckpt, cfg, quant);
    const std::string emb_name = weights.hf_prefix("token_embd.weight") + ".weight";
    const TensorRef emb = ckpt->find(emb_name);
    if (!emb.file || emb.info->shape.size() != 2)
      return NotFound(dir + ": tensor '" + emb_name + "' ([vocab, hidden]) is missing");
    cfg.n_vocab = int(emb.info->shape[0]);
    TS_RETURN_IF_ERROR(pad_vocabulary(&tok, cfg.n_vocab, dir));
    TS_ASSIGN_OR_RETURN(const Architecture* arch, ArchRegistry::get(cfg.arch));
    if (const std::string why = arch->gguf_unconvertible(cfg); !why.empty())
      return Unimplemented(dir + ": a " + cfg.arch + " checkpoint cannot be written as GGUF yet (" + why +
                           "); load the folder itself");
    Meta meta;
    meta.str("general.architecture", cfg.arch);
    if (!cfg.name.empty()) meta.str("general.name", cfg.name);
    arch->add_gguf_config(meta, cfg, &longrope);
    add_tokenizer(meta, tok, chat_template);
    src->meta_ = std::move(meta.list());
    const std::unique_ptr<ArchWeights> slots = arch->new_weights();
    const bool permute = arch->gguf_rope_rows_permuted(cfg);
    for (TensorSpec s : arch->tensor_specs(cfg, slots.get())) {
      if (s.name == "rope_factors_long.weight" || s.name == "rope_factors_short.weight") {
        // The model's spec names the one list it uses; the GGUF holds both, and its loader chooses.
        if (longrope.long_factor.empty()) continue;
        src->add_owned_f32("rope_factors_long.weight", longrope.long_factor);
        src->add_owned_f32("rope_factors_short.weight", longrope.short_factor);
        continue;
      }
      if (s.fused_rows > 0) {
        // A fused projection (phi3's attn_qkv, ffn_up) is stored whole, once: its slot at row 0
        // stands for it, widened to all of its rows; the other slots are row ranges of it.
        if (s.row_begin != 0) continue;
        s.shape[0] = s.fused_rows;
        s.fused_rows = 0;
      }
      TS_ASSIGN_OR_RETURN(auto h, weights.get(s));
      if (!h) {
        if (s.required) return NotFound(dir + ": tensor '" + s.name + "' (HF '" + weights.hf_prefix(s.name) + "') is missing");
        continue;
      }
      const bool qk = s.name.find(".attn_q.") != std::string::npos || s.name.find(".attn_k.") != std::string::npos;
      src->tensors_.push_back(SourceTensor{s.name, h->dtype, s.shape});
      src->hf_names_.push_back(weights.hf_prefix(s.name));
      src->rope_head_.push_back(permute && qk ? cfg.head_dim : 0);
      src->data_.push_back(std::move(*h));
    }
    src->ckpt_ = std::move(ckpt);
    return src;
  }

  const std::string& path() const override { return dir_; }
  const std::vector<SourceTensor>& tensors() const override { return tensors_; }
  const MetadataList& metadata() const override { return meta_; }

  // Row |r| of the GGUF tensor comes from row source_row(r) of the HF one (rope order).
  int64_t source_row(size_t index, int64_t r) const {
    const int64_t d = rope_head_[index];
    return d ? gguf_rope_source_row(r, d) : r;
  }

  Status read_rows(size_t index, int64_t row0, int64_t n, float* out) const override {
    if (index >= tensors_.size()) return OutOfRange(dir_ + ": tensor index " + std::to_string(index));
    const SourceTensor& s = tensors_[index];
    if (row0 < 0 || n < 0 || row0 + n > s.rows())
      return OutOfRange(dir_ + ": tensor '" + s.name + "': rows [" + std::to_string(row0) + ", " + std::to_string(row0 + n) +
                        ") outside its " + std::to_string(s.rows()) + " rows");
    const HostTensor& h = data_[index];
    const DTypeTraits& tr = dtype_traits(h.dtype);
    if (!tr.dequantize_row) return InvalidArgument(dir_ + ": tensor '" + s.name + "': " + tr.name + " cannot be decoded to f32");
    const int64_t rb = dtype_row_bytes(h.dtype, s.cols());
    for (int64_t r = 0; r < n; ++r) {
      float* y = out + r * s.cols();
      tr.dequantize_row(static_cast<const uint8_t*>(h.data) + source_row(index, row0 + r) * rb, y, s.cols());
      if (h.out_scale != 1.0f)
        for (int64_t c = 0; c < s.cols(); ++c) y[c] *= h.out_scale;
    }
    return OkStatus();
  }

  // The stored bytes, when GGUF can hold them as they are (rows in GGUF order, a GGUF dtype).
  const void* raw_data(size_t index) const override {
    if (index >= tensors_.size() || rope_head_[index] || !storable(index)) return nullptr;
    return data_[index].data;
  }
  // " (HF 'model.layers.N....')" for messages, "" for a tensor derived from config.json.
  std::string hf_origin(size_t index) const {
    return hf_names_[index].empty() ? "" : " (HF '" + hf_names_[index] + "')";
  }
  bool storable(size_t index) const {
    return dtype_traits(data_[index].dtype).gguf_type >= 0 && data_[index].out_scale == 1.0f;
  }
  // The bytes of a storable tensor in GGUF row order.
  std::vector<uint8_t> gguf_bytes(size_t index) const {
    const HostTensor& h = data_[index];
    const SourceTensor& s = tensors_[index];
    const int64_t rb = dtype_row_bytes(h.dtype, s.cols());
    std::vector<uint8_t> out(h.nbytes);
    for (int64_t r = 0; r < s.rows(); ++r)
      std::memcpy(out.data() + r * rb, static_cast<const uint8_t*>(h.data) + source_row(index, r) * rb, size_t(rb));
    return out;
  }

 private:
  HfSource() = default;

  // A tensor derived from config.json (not stored in the checkpoint): |values| as a 1-D f32.
  void add_owned_f32(const std::string& name, const std::vector<float>& values) {
    HostTensor h = owned_f32(values);
    tensors_.push_back(SourceTensor{name, h.dtype, h.shape});
    hf_names_.push_back("");
    rope_head_.push_back(0);
    data_.push_back(std::move(h));
  }

  std::string dir_;
  std::unique_ptr<Checkpoint> ckpt_;
  std::vector<SourceTensor> tensors_;
  std::vector<HostTensor> data_;
  std::vector<std::string> hf_names_;  // the HF module each tensor comes from ("" for derived ones)
  std::vector<int64_t> rope_head_;  // head size of permuted q/k rows, else 0
  MetadataList meta_;
};

Result<std::unique_ptr<TensorSource>> open_safetensors_source(const std::string& dir) {
  TS_ASSIGN_OR_RETURN(auto src, HfSource::open(dir));
  return std::unique_ptr<TensorSource>(std::move(src));
}

Status convert_to_gguf(const std::string& dir, const std::string& out_path, const ConvertOptions& opts) {
  TS_ASSIGN_OR_RETURN(auto src, HfSource::open(dir));
  gguf::Writer w;
  for (const auto& [key, value] : src->metadata()) w.add(key, value);
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const SourceTensor& s = src->tensors()[i];
    if (!src->storable(i))
      return Unimplemented(dir + ": tensor '" + s.name + "'" + src->hf_origin(i) + " loads as " + dtype_name(s.dtype) +
                           ", which GGUF cannot store as is; use `tessera quantize DIR OUT.gguf --type T` instead");
    const std::vector<uint8_t> bytes = src->gguf_bytes(i);
    TS_RETURN_IF_ERROR(w.add_tensor(s.name, s.dtype, s.shape, bytes.data(), bytes.size()));
    if (opts.progress) opts.progress(s.name);
  }
  return w.write(out_path);
}

}  // namespace tessera::safetensors

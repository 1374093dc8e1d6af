#include "models/model.h"

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_set>

#include "core/exec/bucket.h"
#include "core/exec/executor.h"
#include "core/exec/key_hasher.h"
#include "models/arch/registry.h"
#include "models/gguf/gguf.h"
#include "models/mapped_file.h"
#include "models/safetensors/hf_model.h"

namespace tessera {

// The device's executor caches executables that address this model's weights and step buffer:
// drop them with the model, so they do not keep its memory alive.
Model::~Model() {
  if (device_) device_->executor().clear();
}

namespace {

Result<TokenizerData> tokenizer_data_from_gguf(const gguf::File& f) {
  TokenizerData d;
  TS_ASSIGN_OR_RETURN(d.model, f.get_string("tokenizer.ggml.model"));
  if (f.find("tokenizer.ggml.pre")) {
    TS_ASSIGN_OR_RETURN(d.pre, f.get_string("tokenizer.ggml.pre"));
  }
  TS_ASSIGN_OR_RETURN(d.tokens, f.get_string_array("tokenizer.ggml.tokens"));
  if (f.find("tokenizer.ggml.scores")) {
    TS_ASSIGN_OR_RETURN(auto s, f.get_float_array("tokenizer.ggml.scores"));
    d.scores.assign(s.begin(), s.end());
  }
  if (f.find("tokenizer.ggml.token_type")) {
    TS_ASSIGN_OR_RETURN(auto t, f.get_int_array("tokenizer.ggml.token_type"));
    for (int64_t x : t) d.token_types.push_back(int32_t(x));
  }
  if (f.find("tokenizer.ggml.merges")) {
    TS_ASSIGN_OR_RETURN(d.merges, f.get_string_array("tokenizer.ggml.merges"));
  }
  auto id = [&](const char* key, int32_t* out) -> Status {
    if (!f.find(key)) return OkStatus();
    TS_ASSIGN_OR_RETURN(int64_t v, f.get_int(key));
    *out = int32_t(v);
    return OkStatus();
  };
  auto flag = [&](const char* key, bool* out) -> Status {
    if (!f.find(key)) return OkStatus();
    TS_ASSIGN_OR_RETURN(*out, f.get_bool(key));
    return OkStatus();
  };
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.bos_token_id", &d.bos));
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.eos_token_id", &d.eos));
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.eot_token_id", &d.eot));
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.unknown_token_id", &d.unk));
  TS_RETURN_IF_ERROR(id("tokenizer.ggml.padding_token_id", &d.pad));
  TS_RETURN_IF_ERROR(flag("tokenizer.ggml.add_bos_token", &d.add_bos));
  TS_RETURN_IF_ERROR(flag("tokenizer.ggml.add_eos_token", &d.add_eos));
  // WordPiece (bert): llama.cpp's converter names [CLS] and [SEP] (sic: "seperator") rather than
  // BOS and EOS, and every BERT input is "[CLS] text [SEP]".
  if (d.model == "bert") {
    if (d.bos < 0) TS_RETURN_IF_ERROR(id("tokenizer.ggml.cls_token_id", &d.bos));
    if (d.eos < 0) TS_RETURN_IF_ERROR(id("tokenizer.ggml.seperator_token_id", &d.eos));
    if (!f.find("tokenizer.ggml.add_bos_token")) d.add_bos = d.bos >= 0;
    if (!f.find("tokenizer.ggml.add_eos_token")) d.add_eos = d.eos >= 0;
  }
  // SentencePiece vocabularies prefix the text with a space unless the file says otherwise.
  d.add_space_prefix = d.model == "llama";
  TS_RETURN_IF_ERROR(flag("tokenizer.ggml.add_space_prefix", &d.add_space_prefix));
  return d;
}

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

Result<std::unique_ptr<Tokenizer>> tokenizer_from_gguf(const gguf::File& f, const std::string& path) {
  auto td = tokenizer_data_from_gguf(f);
  if (!td.ok()) return td.status().with_context(path + ": tokenizer: ");
  auto tok = Tokenizer::create(std::move(td).value());
  if (!tok.ok()) return tok.status().with_context(path + ": tokenizer: ");
  return std::move(tok).value();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path, std::string* chat_template) {
  if (safetensors::is_checkpoint_dir(path)) {
    std::string tmpl;
    auto td = safetensors::read_tokenizer(path, &tmpl);
    if (!td.ok()) return td.status();
    auto tok = Tokenizer::create(std::move(td).value());
    if (!tok.ok()) return tok.status().with_context(path + "/tokenizer.json: ");
    if (chat_template) *chat_template = std::move(tmpl);
    return std::move(tok).value();
  }
  std::shared_ptr<gguf::File> file;
  TS_ASSIGN_OR_RETURN(file, gguf::File::open(path));
  TS_ASSIGN_OR_RETURN(auto tok, tokenizer_from_gguf(*file, path));
  if (chat_template && file->find("tokenizer.chat_template")) {
    TS_ASSIGN_OR_RETURN(*chat_template, file->get_string("tokenizer.chat_template"));
  }
  return tok;
}

// The common tail of both loaders: vocabulary checks, weights, the per-step input buffer.
Status Model::finish_load(const std::string& path, const TensorGetter& get, const LoadOptions& opts) {
  if (cfg_.n_vocab != tokenizer_->vocab_size())
    return InvalidArgument(path + ": the token embedding has " + std::to_string(cfg_.n_vocab) + " rows but the tokenizer has " +
                           std::to_string(tokenizer_->vocab_size()) + " tokens");
  act_ = opts.activation_dtype.value_or(device_->info().activation_dtype);
  pad_decode_ = opts.pad_decode_batches.value_or(device_->info().pads_decode_batches);
  max_padded_seqs_ = std::min(opts.max_seqs, opts.max_batch_tokens);  // the step buffer's capacity
  max_seqs_ = opts.max_seqs;
  max_batch_tokens_ = opts.max_batch_tokens;
  if (act_ != DType::kF32 && act_ != DType::kF16 && act_ != DType::kBF16)
    return InvalidArgument(std::string("activation dtype must be f32, f16 or bf16, got ") + dtype_name(act_));
  TS_RETURN_IF_ERROR(load_weights(path, get, opts));
  // Per-step input buffer: tokens, positions, slots, logit rows [T]; query_start [S+1];
  // seq_lens [S]; block tables [S, max blocks of a full context, rounded up to its bucket].
  const int64_t T = opts.max_batch_tokens, S = opts.max_seqs;
  const int64_t max_blocks = bucket_up(int32_t(std::min<int64_t>((int64_t(cfg_.n_ctx_train) + 15) / 16 + 1, 1 << 30)));
  // The window layers' slots and tables (hybrid memory) take at most as much again as the others.
  step_capacity_ = size_t(4 * (5 * T + (S + 1) + S + 2 * S * max_blocks) + 9 * 256);
  TS_ASSIGN_OR_RETURN(step_buffer_, device_->alloc(step_capacity_));
  return OkStatus();
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, DevicePtr device, const LoadOptions& opts) {
  if (!device) return InvalidArgument("Model::load: no device");
  if (safetensors::is_checkpoint_dir(path)) return load_checkpoint(path, std::move(device), opts);
  if (std::error_code ec; std::filesystem::is_directory(path, ec))
    return InvalidArgument(path + ": a directory without config.json; a model is a .gguf file or a Hugging Face checkpoint "
                           "directory (config.json, tokenizer.json and *.safetensors)");
  std::unique_ptr<Model> m(new Model());
  m->device_ = std::move(device);
  std::shared_ptr<gguf::File> file;
  TS_ASSIGN_OR_RETURN(file, gguf::File::open(path));
  const gguf::File& f = *file;
  TS_ASSIGN_OR_RETURN(const std::string arch, f.get_string("general.architecture"));
  {
    auto found = ArchRegistry::get(arch);
    if (!found.ok()) return found.status().with_context(path + ": ");
    m->arch_ = *found;
  }
  TS_ASSIGN_OR_RETURN(m->cfg_, m->arch_->config_from_gguf(f));
  TS_ASSIGN_OR_RETURN(m->tokenizer_, tokenizer_from_gguf(f, path));
  if (f.find("tokenizer.chat_template")) {
    TS_ASSIGN_OR_RETURN(m->chat_template_, f.get_string("tokenizer.chat_template"));
  }
  // Each layer has tensors of its own: a layer count beyond the file's tensors is wrong, and is
  // caught here, before the tensor specs allocate that many layers.
  if (size_t(m->cfg_.n_layers) > f.tensors().size())
    return InvalidArgument(path + ": block_count " + std::to_string(m->cfg_.n_layers) + " but the file holds only " +
                           std::to_string(f.tensors().size()) + " tensors");
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) return NotFound(path + ": tensor 'token_embd.weight' is missing");
  m->cfg_.n_vocab = int(emb->shape[0]);
  m->cfg_.tied_output = !m->cfg_.is_encoder() && f.find_tensor("output.weight") == nullptr;
  if (const gguf::TensorInfo* types = f.find_tensor("token_types.weight"); types && types->rank == 2)
    m->cfg_.n_token_types = int(types->shape[0]);
  // GGUF tensors are used as they are, in place in the mapped file.
  auto get = [&f, file](const TensorSpec& s) { return gguf_tensor(f, s); };
  TS_RETURN_IF_ERROR(m->finish_load(path, get, opts));
  return m;
}

namespace {

std::string dims_string(const int64_t* d, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return "[" + s + "]";
}

bool same_dims(const gguf::TensorInfo& ti, const int64_t* want, size_t n) {
  if (ti.rank != int(n)) return false;
  for (size_t i = 0; i < n; ++i)
    if (ti.shape[i] != want[i]) return false;
  return true;
}

// The older per-expert layout of a [E, ...] weight: E tensors named by per_expert_name, each
// shape[1:], all of one dtype. Checked completely before any data is read.
Result<std::vector<const gguf::TensorInfo*>> find_experts(const gguf::File& f, const TensorSpec& s) {
  const int E = int(s.shape[0]);
  const int64_t* each = s.shape.data() + 1;
  const size_t rank = s.shape.size() - 1;
  std::vector<const gguf::TensorInfo*> parts;
  for (int e = 0; e < E; ++e) {
    const std::string name = per_expert_name(s.name, e);
    const gguf::TensorInfo* ti = f.find_tensor(name);
    if (!ti) {
      if (e == 0) return NotFound(f.path() + ": tensor '" + s.name + "' is missing (nor is there a per-expert '" + name + "')");
      return NotFound(f.path() + ": per-expert tensor '" + name + "' is missing (expert_count " + std::to_string(E) +
                      " needs experts 0.." + std::to_string(E - 1) + ")");
    }
    if (!same_dims(*ti, each, rank))
      return InvalidArgument(f.path() + ": tensor '" + name + "' has shape " + dims_string(ti->shape.data(), size_t(ti->rank)) +
                             " but the hyperparameters imply " + dims_string(each, rank) + " for each expert");
    if (!parts.empty() && ti->dtype != parts[0]->dtype)
      return InvalidArgument(f.path() + ": tensor '" + name + "' is " + dtype_name(ti->dtype) + " but expert 0 ('" +
                             parts[0]->name + "') is " + dtype_name(parts[0]->dtype) + ": one weight's experts must share a dtype");
    parts.push_back(ti);
  }
  if (f.find_tensor(per_expert_name(s.name, E)))
    return InvalidArgument(f.path() + ": per-expert tensor '" + per_expert_name(s.name, E) + "' is beyond expert_count " +
                           std::to_string(E));
  return parts;
}

HostTensor in_file(const gguf::File& f, const gguf::TensorInfo& ti, const std::vector<int64_t>& shape) {
  HostTensor h;
  h.dtype = ti.dtype;
  h.shape = shape;
  h.data = f.tensor_data(ti);
  h.nbytes = ti.nbytes;
  h.region = static_cast<const uint8_t*>(h.data) - ti.offset;
  h.region_bytes = f.file_size();
  h.region_is_file = true;
  h.keepalive = f.mapping();
  return h;
}

}  // namespace

// |s| from a GGUF file: the tensor itself (a [1, D] row may be stored 1-D), or the per-expert
// tensors of a merged expert weight, in place when they lie at equal distances (as writers place
// them), else stacked into new memory. An absent optional tensor gives nullopt.
Result<std::optional<HostTensor>> Model::gguf_tensor(const gguf::File& f, const TensorSpec& s) {
  const gguf::TensorInfo* ti = f.find_tensor(s.name);
  if (!ti && s.experts) {
    TS_ASSIGN_OR_RETURN(auto parts, find_experts(f, s));
    HostTensor h = in_file(f, *parts[0], s.shape);
    const size_t E = parts.size();
    const int64_t step = E > 1 ? int64_t(parts[1]->offset) - int64_t(parts[0]->offset) : 0;
    bool even = E == 1 || step >= int64_t(parts[0]->nbytes);
    for (size_t e = 1; even && e < E; ++e) even = int64_t(parts[e]->offset) == int64_t(parts[0]->offset) + int64_t(e) * step;
    if (even) {
      h.stride0 = E > 1 ? step : 0;
      h.nbytes = E * parts[0]->nbytes;
      return std::optional<HostTensor>(std::move(h));
    }
    auto block = std::make_shared<std::vector<uint8_t>>();
    for (const auto* p : parts) {
      const auto* d = static_cast<const uint8_t*>(f.tensor_data(*p));
      block->insert(block->end(), d, d + p->nbytes);
    }
    h.data = h.region = block->data();
    h.nbytes = h.region_bytes = block->size();
    h.keepalive = std::shared_ptr<const void>(block, block->data());
    return std::optional<HostTensor>(std::move(h));
  }
  if (!ti) return std::optional<HostTensor>();
  if (s.fused_rows > 0) {
    // One slot's rows of a fused weight, in place: rows are whole blocks in every GGUF format.
    const int64_t want[2] = {s.fused_rows, s.shape[1]};
    if (!same_dims(*ti, want, 2))
      return InvalidArgument(f.path() + ": fused tensor '" + s.name + "' has shape " + dims_string(ti->shape.data(), size_t(ti->rank)) +
                             " but the hyperparameters imply " + dims_string(want, 2));
    HostTensor h = in_file(f, *ti, s.shape);
    const int64_t row_bytes = dtype_row_bytes(ti->dtype, s.shape[1]);
    h.data = static_cast<const uint8_t*>(h.data) + s.row_begin * row_bytes;
    h.nbytes = size_t(s.shape[0] * row_bytes);
    return std::optional<HostTensor>(std::move(h));
  }
  const bool as_1d = s.row_may_be_1d && same_dims(*ti, s.shape.data() + 1, s.shape.size() - 1);
  if (!as_1d && !same_dims(*ti, s.shape.data(), s.shape.size()))
    return InvalidArgument(f.path() + ": tensor '" + s.name + "' has shape " + dims_string(ti->shape.data(), size_t(ti->rank)) +
                           " but the hyperparameters imply " + dims_string(s.shape.data(), s.shape.size()));
  return std::optional<HostTensor>(in_file(f, *ti, s.shape));
}

Result<std::unique_ptr<Model>> Model::load_checkpoint(const std::string& dir, DevicePtr device, const LoadOptions& opts) {
  std::unique_ptr<Model> m(new Model());
  m->device_ = std::move(device);
  safetensors::QuantConfig quant;
  TS_ASSIGN_OR_RETURN(m->cfg_, safetensors::read_config(dir, &quant));
  TS_ASSIGN_OR_RETURN(m->arch_, ArchRegistry::get(m->cfg_.arch));
  TokenizerData td;
  TS_ASSIGN_OR_RETURN(td, safetensors::read_tokenizer(dir, &m->chat_template_));
  std::unique_ptr<safetensors::Checkpoint> ckpt;
  TS_ASSIGN_OR_RETURN(ckpt, safetensors::Checkpoint::open(dir));
  // As on the GGUF path: no more layers than tensors, checked before the specs allocate them.
  if (size_t(m->cfg_.n_layers) > ckpt->names().size())
    return InvalidArgument(dir + "/config.json: num_hidden_layers " + std::to_string(m->cfg_.n_layers) +
                           " but the checkpoint holds only " + std::to_string(ckpt->names().size()) + " tensors");
  safetensors::Weights weights(*ckpt, m->cfg_, quant);
  const std::string emb_name = weights.hf_prefix("token_embd.weight") + ".weight";
  const safetensors::TensorRef emb = ckpt->find(emb_name);
  if (!emb.file) return NotFound(dir + ": tensor '" + emb_name + "' is missing");
  if (emb.info->shape.size() != 2)
    return InvalidArgument(emb.file->path() + ": tensor '" + emb_name + "' has shape " + emb.info->shape_string() +
                           ", expected [vocab, hidden]");
  m->cfg_.n_vocab = int(emb.info->shape[0]);
  TS_RETURN_IF_ERROR(safetensors::pad_vocabulary(&td, m->cfg_.n_vocab, dir));
  {
    auto tok = Tokenizer::create(std::move(td));
    if (!tok.ok()) return tok.status().with_context(dir + "/tokenizer.json: ");
    m->tokenizer_ = std::move(tok).value();
  }
  m->cfg_.tied_output = !m->cfg_.is_encoder() && !ckpt->has("lm_head.weight") && !ckpt->has("lm_head.qweight") &&
                        !ckpt->has("lm_head.weight_packed");
  auto get = [&weights](const TensorSpec& s) { return weights.get(s); };
  TS_RETURN_IF_ERROR(m->finish_load(dir, get, opts));
  return m;
}

Status Model::load_weights(const std::string& path, const TensorGetter& get, const LoadOptions& opts) {
  weights_ = arch_->new_weights();
  const std::vector<TensorSpec> specs = arch_->tensor_specs(cfg_, weights_.get());
  weights_->bind(specs);
  // Check every tensor's presence, dtype and shape before uploading any.
  size_t total = 0;
  std::vector<std::pair<HostTensor, const TensorSpec*>> todo;
  for (const TensorSpec& s : specs) {
    auto got = get(s);
    if (!got.ok()) return got.status();
    if (!got->has_value()) {
      if (s.required) return NotFound(path + ": tensor '" + s.name + "' is missing (architecture " + cfg_.arch + " declares it)");
      continue;
    }
    HostTensor& h = **got;  // in s.shape: the getter checked the stored shape (see TensorGetter)
    if (s.shape.size() == 1 && !dtype_traits(h.dtype).is_float)
      return InvalidArgument(path + ": tensor '" + s.name + "' must be f32/f16/bf16, got " + dtype_name(h.dtype));
    total += h.nbytes;
    todo.push_back({std::move(h), &s});
  }
  // CPU-like devices address the mapped file (or the repacked block) in place; the others get a
  // copy per tensor. One mapping per region.
  std::map<const void*, BufferPtr> mapped;
  size_t done = 0;
  for (auto& [h, s] : todo) {
    auto it = mapped.find(h.region);
    if (it == mapped.end()) {
      auto b = device_->map_host(h.region, h.region_bytes, h.keepalive);
      it = mapped.emplace(h.region, b.ok() ? *b : nullptr).first;
      if (it->second) weights_buffers_.push_back(it->second);
    }
    TS_ASSIGN_OR_RETURN(Tensor t, bind_weight(h, s->name, it->second));
    TS_ASSIGN_OR_RETURN(t, prepare_weight(std::move(t), *s, h));
    *s->slot = WeightTensor{std::move(t), h.out_scale};
    done += h.nbytes;
    if (opts.progress && !opts.progress(done, total)) return Cancelled(path + ": loading cancelled");
  }
  return OkStatus();
}

// |t| (the weight of |s|, bound from |h|) in the layout the device prefers for its matmul: a
// repacked copy where the device makes one (Device::prepare_weight), whose cost is counted in
// prepared_bytes_. The mapped file pages of a replaced tensor are released (MADV_DONTNEED; read
// again from the file should anything touch them), so a repacked model does not hold both copies
// resident. The token embedding stays in rows for the embed op; a tied model gets its output head
// prepared from it as a separate tensor.
Result<Tensor> Model::prepare_weight(Tensor t, const TensorSpec& s, const HostTensor& h) {
  // Tables the embed op reads by rows (bert's positions and token types too) keep their layout.
  const bool embedding = s.embedding_rows;
  if (s.slot == &weights_->tok_embd && cfg_.tied_output) {
    TS_ASSIGN_OR_RETURN(Tensor head, device_->prepare_weight(t, OpKind::kMatmul));
    if (head.buffer != t.buffer) {
      prepared_bytes_ += head.buffer->size();
      weights_->output_tied = WeightTensor{std::move(head), h.out_scale};
      // The repack read every row; the embed op needs only the rows of the tokens it sees, which
      // fault back in from the page cache.
      if (h.region_is_file && t.buffer && t.buffer->host_ptr()) release_file_pages(h.data, h.nbytes);
    }
    return t;
  }
  if (embedding || t.rank < 2) return t;
  const OpKind use = s.experts || s.read_by_matmul_id ? OpKind::kMatmulId : OpKind::kMatmul;
  TS_ASSIGN_OR_RETURN(Tensor p, device_->prepare_weight(t, use));
  if (p.buffer == t.buffer) return t;
  prepared_bytes_ += p.buffer->size();
  if (h.region_is_file) release_file_pages(h.data, h.nbytes);
  return p;
}

// The device tensor of |h|: in place when the device mapped its region, else a copy in device
// memory (per dim-0 slice when the slices are spread out in the file).
Result<Tensor> Model::bind_weight(const HostTensor& h, const std::string& name, const BufferPtr& mapped) {
  Tensor t = Tensor::make(h.dtype, int(h.shape.size()), h.shape.data(), name);
  const auto* src = static_cast<const uint8_t*>(h.data);
  if (mapped) {
    t.buffer = mapped;
    t.offset = size_t(src - static_cast<const uint8_t*>(h.region));
    if (h.stride0) t.stride[0] = h.stride0;
    return t;
  }
  TS_ASSIGN_OR_RETURN(t.buffer, device_->alloc(size_t(t.nbytes())));
  if (!h.stride0) {
    TS_RETURN_IF_ERROR(device_->upload(t, src, size_t(t.nbytes())));
    return t;
  }
  for (int64_t e = 0; e < h.shape[0]; ++e) {
    Tensor part = Tensor::make(h.dtype, int(h.shape.size()) - 1, h.shape.data() + 1, name);
    part.buffer = t.buffer;
    part.offset = size_t(e * t.stride[0]);
    TS_RETURN_IF_ERROR(device_->upload(part, src + e * h.stride0, size_t(part.nbytes())));
  }
  return t;
}

std::vector<const Tensor*> Model::weight_tensors() const {
  std::vector<const Tensor*> out;
  if (!weights_) return out;
  for (const WeightTensor* t : weights_->tensors())
    if (t->buffer) out.push_back(t);
  return out;
}

StepCostCoefficients Model::cost_prior() const {
  // The family's FLOPs (Architecture::cost_shape); bytes: every weight read once per step.
  const CostShape shape = arch_->cost_shape(cfg_);
  const double flops_token = shape.flops_per_token, flops_logit = shape.flops_per_logit, flops_pair = shape.flops_per_pair;
  double bytes = 0;
  for (const Tensor* t : weight_tensors()) bytes += double(t->nbytes());
  // Nominal speeds when tessera-bench has not measured the device: a few AVX2 cores, or a GPU.
  const DeviceInfo& info = device_->info();
  const bool cpu = info.kind == DeviceKind::kCpu || info.kind == DeviceKind::kReference || info.emulated;
  double flops_per_ms = cpu ? 1e7 * std::max(1, info.threads) : 2e10;
  for (const auto& [dtype, f] : info.peak_flops) flops_per_ms = std::max(flops_per_ms, f / 1e3);
  const double bytes_per_ms = (info.peak_read_gbs > 0 ? info.peak_read_gbs : cpu ? 10.0 : 500.0) * 1e6;
  const double fixed_ms = cpu ? 0.5 : 1.0;  // graph build, launches, synchronisation
  return {fixed_ms + bytes / bytes_per_ms, flops_token / flops_per_ms, flops_logit / flops_per_ms, flops_pair / flops_per_ms};
}

Status Model::upload_step(const StepPlan& p, const std::vector<int32_t>& rows, StepTensors* t) {
  const int64_t T = p.n_tokens(), S = p.n_seqs(), R = int64_t(rows.size());
  // The staging slot written two steps ago: its copy was queued ahead of work the engine has
  // since collected, so there is nothing to wait for unless steps are pipelined deeper.
  const int slot = staging_next_;
  staging_next_ = 1 - staging_next_;
  if (!staging_[slot]) {
    TS_ASSIGN_OR_RETURN(staging_[slot], device_->alloc(step_capacity_, MemoryKind::kHostPinned));
  } else if (staging_done_[slot].value > collected_.value) {
    TS_RETURN_IF_ERROR(device_->wait(staging_done_[slot]));
  }
  char* image = static_cast<char*>(staging_[slot]->host_ptr());
  size_t offset = 0;
  auto put = [&](Tensor* dst, std::initializer_list<int64_t> shape, const std::vector<int32_t>& data) -> Status {
    *dst = Tensor::make(DType::kI32, shape);
    if (size_t(dst->numel()) != data.size()) return Internal("step plan: inconsistent sizes");
    dst->buffer = step_buffer_;
    dst->offset = offset;
    offset += size_t(align_up(dst->nbytes(), 256));
    if (offset > step_capacity_)
      return ResourceExhausted("step of " + std::to_string(T) + " tokens and " + std::to_string(S) +
                               " sequences exceeds the step buffer (raise LoadOptions::max_batch_tokens / max_seqs)");
    std::memcpy(image + dst->offset, data.data(), data.size() * 4);
    return OkStatus();
  };
  TS_RETURN_IF_ERROR(put(&t->tokens, {T}, p.tokens));
  TS_RETURN_IF_ERROR(put(&t->positions, {T}, p.positions));
  TS_RETURN_IF_ERROR(put(&t->slot_mapping, {T}, p.slot_mapping));
  TS_RETURN_IF_ERROR(put(&t->query_start, {S + 1}, p.query_start));
  TS_RETURN_IF_ERROR(put(&t->seq_lens, {S}, p.seq_lens));
  // The block-table width is padded to its bucket (core/exec/bucket.h), so a decode's graph, and
  // the executable recorded for it, change only at bucket edges rather than every block_size
  // tokens. Attention reads a row only up to its sequence's length; the padding is never read.
  const int32_t width = bucket_up(p.max_blocks);
  if (width == p.max_blocks) {
    TS_RETURN_IF_ERROR(put(&t->block_tables, {S, width}, p.block_tables));
  } else {
    padded_tables_.assign(size_t(S) * size_t(width), 0);
    for (int64_t s = 0; s < S; ++s)
      std::copy_n(p.block_tables.begin() + s * p.max_blocks, p.max_blocks, padded_tables_.begin() + s * width);
    TS_RETURN_IF_ERROR(put(&t->block_tables, {S, width}, padded_tables_));
  }
  if (p.window_max_blocks > 0) {
    // The sliding-window layers' slots and tables (hybrid memory), padded as the others.
    TS_RETURN_IF_ERROR(put(&t->window_slot_mapping, {T}, p.window_slot_mapping));
    const int32_t ww = bucket_up(p.window_max_blocks);
    padded_tables_.assign(size_t(S) * size_t(ww), 0);
    for (int64_t s = 0; s < S; ++s)
      std::copy_n(p.window_block_tables.begin() + s * p.window_max_blocks, p.window_max_blocks, padded_tables_.begin() + s * ww);
    TS_RETURN_IF_ERROR(put(&t->window_block_tables, {S, ww}, padded_tables_));
  } else {
    t->window_slot_mapping = Tensor{};
    t->window_block_tables = Tensor{};
  }
  TS_RETURN_IF_ERROR(put(&t->logit_rows, {R}, rows));
  // One queued copy of the whole image: the device reads the inputs in queue order, after the
  // previous step has finished with the step buffer, and the host does not wait for it.
  const CopyRegion region{staging_[slot].get(), 0, step_buffer_.get(), 0, offset};
  TS_ASSIGN_OR_RETURN(staging_done_[slot], device_->copy(std::span<const CopyRegion>(&region, 1)));
  return OkStatus();
}

const StepPlan& Model::pad_decode(const StepPlan& plan) {
  const int32_t S = plan.n_seqs();
  if (!pad_decode_ || !plan.pool_seqs.empty() || plan.n_tokens() != S || plan.logit_rows.size() != size_t(S) || S == 0)
    return plan;
  for (int32_t s = 0; s <= S; ++s)
    if (plan.query_start[size_t(s)] != s) return plan;  // not one row per sequence
  const int32_t padded = std::min(bucket_up(S), std::max(S, max_padded_seqs_));
  if (padded == S) return plan;
  StepPlan& p = padded_plan_;
  p = plan;
  p.block_copies.clear();
  p.window_block_copies.clear();
  p.swap_out.clear();
  p.swap_in.clear();
  const std::vector<int32_t> first_table(plan.block_tables.begin(), plan.block_tables.begin() + plan.max_blocks);
  const std::vector<int32_t> first_window_table(plan.window_block_tables.begin(),
                                                plan.window_block_tables.begin() + plan.window_max_blocks);
  for (int32_t s = S; s < padded; ++s) {
    if (plan.window_max_blocks > 0) {
      p.window_slot_mapping.push_back(-1);
      p.window_block_tables.insert(p.window_block_tables.end(), first_window_table.begin(), first_window_table.end());
    }
    p.tokens.push_back(plan.tokens[0]);
    p.positions.push_back(0);
    p.slot_mapping.push_back(-1);  // writes nothing
    p.query_start.push_back(s + 1);
    p.seq_lens.push_back(1);       // attends to the first sequence's token 0, which is cached
    p.block_tables.insert(p.block_tables.end(), first_table.begin(), first_table.end());
    p.logit_rows.push_back(s);
  }
  return p;
}

Status Model::forward(const StepPlan& plan, KvCache& kv, std::vector<float>* logits) {
  TS_RETURN_IF_ERROR(submit(plan, kv));
  return collect(logits);
}

Status Model::submit(const StepPlan& plan, KvCache& kv) {
  if (pending_.active) return Internal("Model::submit: the previous step was not collected");
  pending_.status = OkStatus();
  pending_.logits_floats = 0;
  pending_.plan = {};
  if (plan.n_tokens() == 0) {
    pending_.active = true;
    pending_.done = Event{};
    return OkStatus();
  }
  for (int32_t t : plan.tokens)
    if (t < 0 || t >= cfg_.n_vocab) return InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary");
  if (!plan.pool_seqs.empty() && embedding_dim() == 0) return InvalidArgument(why_no_embeddings());
  if (cfg_.is_encoder() && !plan.logit_rows.empty())
    return InvalidArgument(cfg_.arch + " is an encoder: it produces embeddings, not next-token logits");
  // A step where nothing samples (a prefill chunk) still runs every layer to fill the KV cache;
  // the graph then computes one logits row, which is discarded.
  const StepPlan& run = pad_decode(plan);
  const std::vector<int32_t> last_row = {run.n_tokens() - 1};
  const std::vector<int32_t>& rows = run.logit_rows.empty() ? last_row : run.logit_rows;
  StepTensors in;
  in.act = act_;
  TS_RETURN_IF_ERROR(upload_step(run, rows, &in));
  Pending& p = pending_;
  p.rows = plan.n_tokens();
  const bool stats = collect_expert_stats_ && cfg_.is_moe();
  StepOptions so;
  so.expert_stats = stats;
  so.pooled = !plan.pool_seqs.empty();
  TS_ASSIGN_OR_RETURN(p.g, step_graph(in, kv, so));
  TS_ASSIGN_OR_RETURN(p.done, device_->compute_async(p.g->graph));
  p.active = true;
  if (!plan.logit_rows.empty()) {
    // The logits rows go to host-pinned memory on the queue, behind the step: collect() waits
    // for this copy alone.
    const Tensor& lt = p.g->graph.tensor(p.g->out);  // [rows (padded), vocab]: the step's own rows first
    const size_t bytes = plan.logit_rows.size() * size_t(lt.cols()) * 4;
    if (!logits_host_ || logits_host_->size() < bytes) {
      logits_host_.reset();
      auto grown = device_->alloc(std::max(bytes, size_t(cfg_.n_vocab) * 4 * 8), MemoryKind::kHostPinned);
      if (!grown.ok()) {
        p.status = grown.status();
        return OkStatus();
      }
      logits_host_ = *std::move(grown);
    }
    const CopyRegion region{lt.buffer.get(), lt.offset, logits_host_.get(), 0, bytes};
    auto copied = device_->copy(std::span<const CopyRegion>(&region, 1));
    if (!copied.ok()) p.status = copied.status();
    else p.done = *copied;
    p.logits_floats = bytes / 4;
  }
  if (!plan.pool_seqs.empty()) p.plan = plan;
  return OkStatus();
}

Status Model::collect(std::vector<float>* logits) {
  logits->clear();
  if (!pending_.active) return Internal("Model::collect: no step was submitted");
  Pending& p = pending_;
  p.active = false;
  TS_RETURN_IF_ERROR(p.status);
  TS_RETURN_IF_ERROR(device_->executor().wait(p.done));
  collected_ = p.done;
  if (p.logits_floats > 0) {
    const float* src = static_cast<const float*>(logits_host_->host_ptr());
    logits->assign(src, src + p.logits_floats);
  }
  if (!p.g->route_ids.empty()) TS_RETURN_IF_ERROR(count_experts(p.g->graph, p.g->route_ids, p.rows));
  if (p.plan.pool_seqs.empty()) return OkStatus();
  return pool(p.plan, p.g->graph, p.g->hidden, logits);
}

namespace {
constexpr size_t kStepGraphs = 8;
}  // namespace

Result<Model::StepGraph*> Model::step_graph(const StepTensors& in, KvCache& kv, const StepOptions& opts) {
  KeyHasher key;
  for (const Tensor* t : {&in.tokens, &in.positions, &in.slot_mapping, &in.query_start, &in.seq_lens, &in.block_tables,
                          &in.logit_rows, &in.window_slot_mapping, &in.window_block_tables}) {
    key.mix_tensor(*t);
    key.mix_place(*t);
  }
  key.mix(uint64_t(in.act));
  key.mix(uint64_t(opts.expert_stats) | uint64_t(opts.pooled) << 1);
  // The KV cache: kept graphs hold its buffers (and so keep them alive), so graphs of another
  // cache are dropped rather than kept beside it. While they are kept, a new cache cannot reuse
  // the old one's buffer addresses, so its first buffers tell the caches apart.
  KeyHasher cache;
  cache.mix(reinterpret_cast<uintptr_t>(&kv));
  cache.mix(step_graphs_generation_);
  if (kv.config().n_layers > 0) {
    cache.mix_place(kv.k(0));
    cache.mix_place(kv.v(0));
  }
  if (cache.value() != step_graphs_kv_) {
    step_graphs_.clear();
    step_graphs_kv_ = cache.value();
  }
  auto hit = std::find_if(step_graphs_.begin(), step_graphs_.end(), [&key](const StepGraph& g) { return g.key == key.value(); });
  if (hit != step_graphs_.end()) {
    step_graphs_.splice(step_graphs_.begin(), step_graphs_, hit);
    return &step_graphs_.front();
  }
  StepGraph g;
  g.key = key.value();
  GraphContext ctx(g.graph, cfg_, in, kv, opts);
  g.out = arch_->build_graph(ctx, *weights_);
  g.hidden = opts.pooled ? ctx.hidden : kNoValue;
  g.route_ids = std::move(ctx.route_ids);
  TS_RETURN_IF_ERROR(g.graph.status());
  ++step_graphs_built_;
  if (step_graphs_.size() >= kStepGraphs) step_graphs_.pop_back();
  step_graphs_.push_front(std::move(g));
  return &step_graphs_.front();
}

Status Model::pool(const StepPlan& plan, const Graph& g, ValueId hidden, std::vector<float>* out) {
  const Tensor& ht = g.tensor(hidden);  // [T, D]
  const int64_t D = ht.cols();
  std::vector<float> h(size_t(ht.numel()));
  TS_RETURN_IF_ERROR(device_->download(ht, h.data(), h.size() * 4));
  for (int32_t s : plan.pool_seqs) {
    if (s < 0 || s >= plan.n_seqs()) return Internal("pool_seqs: sequence " + std::to_string(s) + " not in the step");
    const int64_t r0 = plan.query_start[size_t(s)], r1 = plan.query_start[size_t(s) + 1];
    // Pooling sees the whole sequence: a chunk that continues cached tokens would leave them out.
    if (plan.seq_lens[size_t(s)] != r1 - r0 || r1 <= r0)
      return Internal("pool_seqs: sequence " + std::to_string(s) + " is not whole in this step");
    std::vector<double> v(size_t(D), 0.0);
    const int64_t first = cfg_.pooling == Pooling::kCls ? r0 : cfg_.pooling == Pooling::kLast ? r1 - 1 : r0;
    const int64_t last = cfg_.pooling == Pooling::kMean ? r1 : first + 1;
    for (int64_t r = first; r < last; ++r)
      for (int64_t i = 0; i < D; ++i) v[size_t(i)] += h[size_t(r * D + i)];
    double norm = 0.0;
    for (double& e : v) {
      e /= double(last - first);
      norm += e * e;
    }
    // As sentence-transformers' Normalize (F.normalize): divide by max(|v|, 1e-12).
    const double scale = cfg_.normalize_embd ? 1.0 / std::max(std::sqrt(norm), 1e-12) : 1.0;
    for (double e : v) out->push_back(float(e * scale));
  }
  return OkStatus();
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kNone: return "none";
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
    case Pooling::kLast: return "last";
  }
  return "unknown";
}

std::string Model::why_no_embeddings() const {
  if (cfg_.pooling != Pooling::kNone) return "";
  return "model '" + (cfg_.name.empty() ? cfg_.arch : cfg_.name) + "' (" + cfg_.arch +
         ") is a decoder without pooling: embeddings need --pooling last or --pooling mean";
}

Status Model::set_pooling(Pooling p) {
  if (p == Pooling::kNone && cfg_.is_encoder())
    return InvalidArgument(cfg_.arch + " is an encoder: its only output is the pooled embedding");
  ++step_graphs_generation_;  // the graph builder reads the pooling: kept graphs go at the next step
  cfg_.pooling = p;
  return OkStatus();
}

void Model::set_collect_expert_stats(bool on) {
  ++step_graphs_generation_;
  collect_expert_stats_ = on;
  if (on && expert_stats_.counts.empty()) reset_expert_stats();
}

void Model::reset_expert_stats() {
  expert_stats_ = ExpertStats{};
  if (!cfg_.is_moe()) return;
  expert_stats_.n_layers = cfg_.n_layers;
  expert_stats_.n_experts = cfg_.n_experts;
  expert_stats_.k = cfg_.n_experts_used;
  expert_stats_.counts.assign(size_t(cfg_.n_layers) * size_t(cfg_.n_experts), 0);
}

Status Model::count_experts(const Graph& g, const std::vector<ValueId>& route_ids, int64_t rows) {
  if (int(route_ids.size()) != cfg_.n_layers) return Internal("expert stats: one route per layer expected");
  std::vector<int32_t> ids;
  for (size_t l = 0; l < route_ids.size(); ++l) {
    const Tensor& t = g.tensor(route_ids[l]);
    ids.resize(size_t(t.numel()));
    TS_RETURN_IF_ERROR(device_->download(t, ids.data(), ids.size() * 4));
    int64_t* row = &expert_stats_.counts[l * size_t(cfg_.n_experts)];
    // [T, k] routes; rows past |rows| are a padded step's padding.
    const size_t used = std::min(ids.size(), size_t(rows) * size_t(cfg_.n_experts_used));
    for (size_t i = 0; i < used; ++i) {
      const int32_t e = ids[i];
      if (e < 0 || e >= cfg_.n_experts) return Internal("expert stats: expert id " + std::to_string(e) + " out of range");
      ++row[e];
    }
  }
  expert_stats_.tokens += std::min<int64_t>(rows, g.tensor(route_ids[0]).shape[0]);
  return OkStatus();
}

std::string expert_stats_table(const ExpertStats& s) {
  if (s.n_layers == 0 || s.n_experts == 0) return "expert load: not a mixture-of-experts model\n";
  static const char* const kBars[] = {" ", "\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
  char line[160];
  std::snprintf(line, sizeof line, "expert load: %lld tokens x top-%d over %d experts (uniform %.1f%% each)\n",
                static_cast<long long>(s.tokens), s.k, s.n_experts, 100.0 / s.n_experts);
  std::string out = line;
  for (int l = 0; l < s.n_layers; ++l) {
    int64_t total = 0, hi = 0;
    int arg_hi = 0, arg_lo = 0;
    for (int e = 0; e < s.n_experts; ++e) {
      total += s.at(l, e);
      if (s.at(l, e) > s.at(l, arg_hi)) arg_hi = e;
      if (s.at(l, e) < s.at(l, arg_lo)) arg_lo = e;
    }
    hi = s.at(l, arg_hi);
    std::string bars;
    for (int e = 0; e < s.n_experts; ++e)
      bars += kBars[hi > 0 ? (s.at(l, e) * 8 + hi - 1) / hi : 0];  // any routed token shows a bar
    const double pct = total > 0 ? 100.0 / double(total) : 0.0;
    std::snprintf(line, sizeof line, "  layer %3d |", l);
    out += line + bars;
    std::snprintf(line, sizeof line, "| max e%d %.1f%%, min e%d %.1f%%\n", arg_hi, double(hi) * pct, arg_lo,
                  double(s.at(l, arg_lo)) * pct);
    out += line;
  }
  return out;
}

Result<std::unique_ptr<KvCache>> Model::create_kv_cache(int64_t n_tokens, DType dtype, int block_size, bool window_memory) {
  KvCacheConfig kc;
  kc.n_layers = cfg_.n_layers;
  kc.n_kv_heads = cfg_.n_kv_heads;
  kc.head_dim = cfg_.head_dim;
  kc.block_size = block_size;
  kc.n_blocks = int((n_tokens + block_size - 1) / block_size);
  kc.dtype = dtype;
  // Sliding-window layers in a pool of their own when that holds fewer blocks than the context:
  // each of the max_seqs sequences it is sized for (LoadOptions) needs its window, one step's
  // new tokens (a whole prefill chunk) on top, and a partial block at each end (as llama.cpp
  // sizes its SWA cache by n_seq_max). More sequences than that wait for window blocks.
  const std::vector<LayerMemory> layout = memory_layout();
  int window = 0;
  for (const LayerMemory& m : layout)
    if (m.kind == LayerMemoryKind::kSlidingWindow) window = std::max(window, m.window);
  if (window_memory && window > 0 && block_size > 0) {
    const int64_t seqs = std::max(max_seqs_, 1);
    const int64_t blocks = (int64_t(window) * seqs + max_batch_tokens_ + block_size - 1) / block_size + 2 * seqs;
    if (blocks < kc.n_blocks) {
      kc.window = window;
      kc.n_window_blocks = int(blocks);
      kc.window_layers.resize(layout.size());
      for (size_t l = 0; l < layout.size(); ++l)
        kc.window_layers[l] = layout[l].kind == LayerMemoryKind::kSlidingWindow && layout[l].window == window;
    }
  }
  return KvCache::create(*device_, kc);
}

TextCodec Model::codec() const {
  TextCodec c;
  const Tokenizer* t = tokenizer_.get();
  c.piece = [t](int32_t id) { return t->token_to_piece(id); };
  c.is_eog = [t](int32_t id) { return t->is_eog(id); };
  return c;
}

}  // namespace tessera

// Model's loading: a GGUF file or an HF checkpoint folder through its family's Architecture
// (config, weights struct, tensor specs), weights checked, bound in place or uploaded, and
// prepared in the device's layout; the tokenizer and chat template; the KV cache's layout.
// Running steps is models/model_step.cpp.
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
  (void)stop_followers();  // a tensor-parallel rank 0 lets its followers go (no-op otherwise)
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
  TS_RETURN_IF_ERROR(set_tensor_parallel(opts.comm).with_context(path + ": "));
  followers_stopped_ = opts.tp_every_rank_steps;  // nobody follows: submit broadcasts nothing
  placement_.reset();
  if (opts.placement.main_layers != kFitLayers) {  // else load_weights fits it to the weights' sizes
    auto placed = Placement::resolve(opts.placement, device_, cfg_.n_layers);
    if (!placed.ok()) return placed.status().with_context(path + ": ");
    placement_.emplace(std::move(placed).value());
  }
  TS_RETURN_IF_ERROR(load_weights(path, get, opts));
  // Per-step input buffer: tokens, positions, slots, logit rows [T]; query_start [S+1];
  // seq_lens [S]; block tables [S, max blocks of a full context, rounded up to its bucket].
  const int64_t T = opts.max_batch_tokens, S = opts.max_seqs;
  const int64_t max_blocks = bucket_up(int32_t(std::min<int64_t>((int64_t(cfg_.n_ctx_train) + 15) / 16 + 1, 1 << 30)));
  // A model with sliding-window layers may keep them in a pool of their own (create_kv_cache):
  // their slots and tables then take as much again as the others.
  bool windows = false;
  for (const LayerMemory& m : memory_layout()) windows = windows || m.kind == LayerMemoryKind::kSlidingWindow;
  const int64_t groups = windows ? 2 : 1;
  // (+ S state slots of recurrent layers)
  // (+ S state slots of recurrent layers, + S LoRA adapter slots)
  step_capacity_ = size_t(4 * ((3 + groups) * T + (S + 1) + 3 * S + groups * S * max_blocks) + (9 + 2 * groups) * 256);
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
  lora_targets_.clear();
  for (const TensorSpec& s : specs)
    if (s.shape.size() == 2 && !s.experts && s.fused_rows == 0 && !s.embedding_rows && s.name != "output.weight" &&
        s.name != "token_embd.weight")
      lora_targets_.push_back({s.name, s.slot, s.shape[0], s.shape[1]});
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
    if (comm_ && s.tp_dim >= 0) {  // this rank's shard
      TS_ASSIGN_OR_RETURN(h, shard_weight(h, s.tp_dim, s.name));
    }
    if (s.shape.size() == 1 && !dtype_traits(h.dtype).is_float)
      return InvalidArgument(path + ": tensor '" + s.name + "' must be f32/f16/bf16, got " + dtype_name(h.dtype));
    total += h.nbytes;
    todo.push_back({std::move(h), &s});
  }
  if (!placement_) {
    std::vector<std::pair<std::string, size_t>> sizes;
    for (const auto& [h, s] : todo) sizes.push_back({s->name, h.nbytes});
    auto placed = fit_placement(opts.placement, sizes);
    if (!placed.ok()) return placed.status().with_context(path + ": ");
    placement_.emplace(std::move(placed).value());
  }
  if (comm_ && placement_->split())
    return Unimplemented(path +
                         ": tensor parallelism with a model split across devices (--gpu-layers, --cpu-moe, "
                         "--override-tensor) is not supported yet");
  // CPU-like devices address the mapped file (or the repacked block) in place; the others get a
  // copy per tensor. One mapping per region and device.
  std::map<std::pair<const void*, Device*>, BufferPtr> mapped;
  auto mapping = [&](Device& dev, const HostTensor& h) -> const BufferPtr& {
    auto it = mapped.find({h.region, &dev});
    if (it == mapped.end()) {
      auto b = dev.map_host(h.region, h.region_bytes, h.keepalive);
      it = mapped.emplace(std::make_pair(h.region, &dev), b.ok() ? *b : nullptr).first;
      if (it->second) weights_buffers_.push_back(it->second);
    }
    return it->second;
  };
  // A tied output head on another device than the token embedding (a split placement) gets a
  // copy of the table there.
  Device& head_device = placement_->tensor_device("output.weight", false);
  size_t done = 0;
  for (auto& [h, s] : todo) {
    Device& dev = placement_->tensor_device(s->name, s->experts);
    TS_ASSIGN_OR_RETURN(Tensor t, bind_weight(dev, h, s->name, mapping(dev, h)));
    TS_ASSIGN_OR_RETURN(t, prepare_weight(dev, std::move(t), *s, h));
    if (s->slot == &weights_->tok_embd && cfg_.tied_output && &head_device != &dev) {
      TS_ASSIGN_OR_RETURN(Tensor copy, bind_weight(head_device, h, "output.weight", mapping(head_device, h)));
      TS_ASSIGN_OR_RETURN(Tensor head, head_device.prepare_weight(copy, OpKind::kMatmul));
      if (head.buffer != copy.buffer) prepared_bytes_ += head.buffer->size();
      weights_->output_tied = WeightTensor{std::move(head), h.out_scale};
    }
    *s->slot = WeightTensor{std::move(t), h.out_scale};
    // A row-parallel shard (its input dim split) computes this rank's part of a sum.
    s->slot->partial_sum = comm_ && s->tp_dim >= 1 && s->tp_dim == int(s->shape.size()) - 1;
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
Result<Tensor> Model::prepare_weight(Device& dev, Tensor t, const TensorSpec& s, const HostTensor& h) {
  // Tables the embed op reads by rows (bert's positions and token types too) keep their layout.
  const bool embedding = s.embedding_rows;
  if (s.slot == &weights_->tok_embd && cfg_.tied_output) {
    if (&placement_->tensor_device("output.weight", false) != &dev) return t;  // load_weights copies it
    TS_ASSIGN_OR_RETURN(Tensor head, dev.prepare_weight(t, OpKind::kMatmul));
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
  TS_ASSIGN_OR_RETURN(Tensor p, dev.prepare_weight(t, use));
  if (p.buffer == t.buffer) return t;
  prepared_bytes_ += p.buffer->size();
  if (h.region_is_file) release_file_pages(h.data, h.nbytes);
  return p;
}

// The device tensor of |h|: in place when the device mapped its region, else a copy in device
// memory (per dim-0 slice when the slices are spread out in the file).
Result<Tensor> Model::bind_weight(Device& dev, const HostTensor& h, const std::string& name, const BufferPtr& mapped) {
  Tensor t = Tensor::make(h.dtype, int(h.shape.size()), h.shape.data(), name);
  const auto* src = static_cast<const uint8_t*>(h.data);
  if (mapped) {
    t.buffer = mapped;
    t.offset = size_t(src - static_cast<const uint8_t*>(h.region));
    if (h.stride0) t.stride[0] = h.stride0;
    return t;
  }
  TS_ASSIGN_OR_RETURN(t.buffer, dev.alloc(size_t(t.nbytes())));
  if (!h.stride0) {
    TS_RETURN_IF_ERROR(dev.upload(t, src, size_t(t.nbytes())));
    return t;
  }
  for (int64_t e = 0; e < h.shape[0]; ++e) {
    Tensor part = Tensor::make(h.dtype, int(h.shape.size()) - 1, h.shape.data() + 1, name);
    part.buffer = t.buffer;
    part.offset = size_t(e * t.stride[0]);
    TS_RETURN_IF_ERROR(dev.upload(part, src + e * h.stride0, size_t(part.nbytes())));
  }
  return t;
}

Result<Placement> Model::fit_placement(const PlacementOptions& o,
                                       const std::vector<std::pair<std::string, size_t>>& sizes) {
  // Each layer's weights plus the K/V it keeps for o.fit_kv_tokens tokens (a window layer at
  // most its window; recurrent state stays on the main device and is not counted).
  std::vector<int64_t> layer(size_t(cfg_.n_layers), 0);
  int64_t head = 0, other = 0;
  for (const auto& [name, bytes] : sizes) {
    const int l = gguf_layer_of(name);
    if (l >= 0 && l < cfg_.n_layers) layer[size_t(l)] += int64_t(bytes);
    else if (name.rfind("output", 0) == 0) head += int64_t(bytes);
    else other += int64_t(bytes);
    if (name == "token_embd.weight" && cfg_.tied_output) head += int64_t(bytes);  // the head's own copy
  }
  const std::vector<LayerMemory> layout = memory_layout();
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const LayerMemory m = size_t(l) < layout.size() ? layout[size_t(l)] : LayerMemory{};
    const int64_t tokens = m.kind == LayerMemoryKind::kFullAttention   ? o.fit_kv_tokens
                           : m.kind == LayerMemoryKind::kSlidingWindow ? std::min<int64_t>(o.fit_kv_tokens, m.window)
                                                                       : 0;
    const int64_t heads = cfg_.layer_kv_heads.empty() ? cfg_.n_kv_heads : cfg_.layer_kv_heads[size_t(l)];
    const int64_t dim = cfg_.layer_head_dim.empty() ? cfg_.head_dim : cfg_.layer_head_dim[size_t(l)];
    layer[size_t(l)] += 2 * tokens * heads * dim * o.fit_kv_bytes_per_element;
  }
  const size_t budget = o.main_budget ? o.main_budget : device_->memory().free;
  const int n = fit_main_layers(layer, head, other, int64_t(double(budget) * 0.95));
  PlacementOptions p = o;
  if (n > cfg_.n_layers) p = PlacementOptions{};  // everything fits: one device
  else p.main_layers = n;
  return Placement::resolve(p, device_, cfg_.n_layers);
}

std::vector<std::pair<const Device*, size_t>> Model::weight_bytes_per_device() const {
  std::vector<std::pair<const Device*, size_t>> out{{device_.get(), 0}};
  for (const Tensor* t : weight_tensors()) {
    if (!t->buffer) continue;
    const Device* d = t->buffer->device();
    auto it = std::find_if(out.begin(), out.end(), [d](const auto& e) { return e.first == d; });
    if (it == out.end()) it = out.insert(out.end(), {d, 0});
    it->second += size_t(t->nbytes());
  }
  return out;
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
  const bool cpu = info.type == DeviceType::kCpu || info.emulated;
  double flops_per_ms = cpu ? 1e7 * std::max(1, info.threads) : 2e10;
  for (const auto& [dtype, f] : info.peak_flops) flops_per_ms = std::max(flops_per_ms, f / 1e3);
  const double bytes_per_ms = (info.peak_read_gbs > 0 ? info.peak_read_gbs : cpu ? 10.0 : 500.0) * 1e6;
  const double fixed_ms = cpu ? 0.5 : 1.0;  // graph build, launches, synchronisation
  return {fixed_ms + bytes / bytes_per_ms, flops_token / flops_per_ms, flops_logit / flops_per_ms, flops_pair / flops_per_ms};
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
  cfg_.pooling = rank_cfg_.pooling = p;
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
  const ModelConfig& c = rank_cfg_;  // a tensor-parallel rank keeps its KV heads only
  kc.n_layers = c.n_layers;
  kc.n_kv_heads = c.n_kv_heads;
  kc.head_dim = c.head_dim;
  kc.layer_kv_heads = c.layer_kv_heads;
  kc.layer_head_dim = c.layer_head_dim;
  kc.kv_source = c.layer_kv_source;
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
  // Recurrent layers keep a state per sequence (a slot for each of max_seqs) and no K/V; the
  // checkpoint rows hold prefix-cache entries and one draft snapshot per sequence.
  kc.recurrent.layers = arch_->recurrent_states(c);
  if (!kc.recurrent.layers.empty()) {
    kc.recurrent.n_slots = std::max(max_seqs_, 1);
    kc.recurrent.n_checkpoints = kc.recurrent.n_slots + 8;
  }
  // A split placement: each layer's K/V on the device that runs its attention (the recurrent
  // states stay on the main device, and their layers' ops run there).
  if (placement_ && placement_->split())
    for (int l = 0; l < cfg_.n_layers; ++l) kc.layer_devices.push_back(&placement_->layer_device(l));
  return KvCache::create(*device_, kc);
}

TextCodec Model::codec() const {
  TextCodec c;
  const Tokenizer* t = tokenizer_.get();
  c.piece = [t](int32_t id) { return t->token_to_piece(id); };
  c.is_eog = [t](int32_t id) { return t->is_eog(id); };
  return c;
}

namespace {
// Device slots for |adapters|: one per adapter (holes included), at most |max_loras| when set.
int lora_slots_for(const std::vector<LoraAdapter>& adapters, int max_loras) {
  const int n = std::max(1, int(adapters.size()));
  return max_loras > 0 ? std::min(n, max_loras) : n;
}
}  // namespace

Result<int> Model::add_lora(const std::string& name, const std::string& path, const LoraLimits& limits) {
  if (pending_.active) return Internal("Model::add_lora: a step is pending (collect it first)");
  if (name.empty()) return InvalidArgument("an adapter needs a name");
  if (tp_size() > 1)
    return Unimplemented("LoRA adapters on a tensor-parallel model (" + std::to_string(tp_size()) +
                         " ranks) are not supported yet");
  for (const LoraAdapter& a : loras_)
    if (a.name == name)
      return InvalidArgument("an adapter named '" + name + "' is already loaded (from " + a.path + ")");
  const int loaded = int(std::count_if(loras_.begin(), loras_.end(), [](const LoraAdapter& a) { return a.id != 0; }));
  if (const int cap = limits.loaded_cap(); cap > 0 && loaded >= cap)
    return ResourceExhausted(
        "cannot load adapter '" + name + "': " + std::to_string(loaded) + " adapters are loaded, the most " +
        (limits.max_cpu_loras > 0 ? "--max-cpu-loras" : "--max-loras") + " allows (" + std::to_string(cap) + ")");
  std::vector<LoraTarget> targets;
  for (const LoraTarget& t : lora_targets_)
    if (t.weight->buffer) targets.push_back(t);
  // A file is llama.cpp's GGUF adapter; anything else a PEFT folder (whose reader names what is missing).
  std::error_code ec;
  const bool file = std::filesystem::is_regular_file(path, ec);
  TS_ASSIGN_OR_RETURN(LoraAdapter a, file ? read_gguf_adapter(name, path, *arch_, cfg_, targets)
                                          : read_peft_adapter(name, path, *arch_, cfg_, targets));
  if (limits.max_rank > 0 && a.rank > limits.max_rank)
    return InvalidArgument("adapter '" + name + "' (" + path + ") has rank " + std::to_string(a.rank) +
                           ", above --max-lora-rank " + std::to_string(limits.max_rank));
  a.id = next_lora_id_ + 1;
  std::vector<LoraAdapter> next = loras_;
  auto hole = std::find_if(next.begin(), next.end(), [](const LoraAdapter& x) { return x.id == 0; });
  const int slot = int(hole - next.begin());
  if (hole == next.end()) next.push_back(std::move(a));
  else *hole = std::move(a);
  TS_ASSIGN_OR_RETURN(std::unique_ptr<LoraSet> set,
                      LoraSet::build(*device_, next, lora_slots_for(next, limits.max_loras)));
  lora_max_slots_ = limits.max_loras;
  ++next_lora_id_;
  loras_ = std::move(next);
  lora_set_ = std::move(set);
  n_loras_.store(int32_t(loras_.size()), std::memory_order_release);
  ++step_graphs_generation_;  // kept graphs read the old slots' tensors
  return slot;
}

Status Model::remove_lora(int slot) {
  if (pending_.active) return Internal("Model::remove_lora: a step is pending (collect it first)");
  if (slot < 0 || slot >= int(loras_.size()) || loras_[size_t(slot)].id == 0)
    return NotFound("no adapter is loaded in slot " + std::to_string(slot));
  if (slot == default_lora_)
    return InvalidArgument("adapter '" + loras_[size_t(slot)].name +
                           "' is the default (set_default_lora): not unloaded");
  std::vector<LoraAdapter> next = loras_;
  next[size_t(slot)] = LoraAdapter{};
  TS_ASSIGN_OR_RETURN(std::unique_ptr<LoraSet> set,
                      LoraSet::build(*device_, next, lora_slots_for(next, lora_max_slots_)));
  loras_ = std::move(next);
  lora_set_ = std::move(set);
  ++step_graphs_generation_;
  return OkStatus();
}

Status Model::set_default_lora(int slot, float scale) {
  if (!std::isfinite(scale)) return InvalidArgument("a LoRA scale must be a finite number");
  if (slot < -1 || slot >= int(loras_.size()))
    return InvalidArgument("adapter slot " + std::to_string(slot) + " outside [-1, " + std::to_string(loras_.size()) +
                           ")");
  default_lora_ = slot;
  default_lora_scale_ = scale;
  return OkStatus();
}

}  // namespace tessera

namespace tessera {

int32_t Model::lora_variant(const LoraRef& ref, float scale) {
  const int32_t v = lora_variant_id(ref.id, scale);
  // Bounded: requests may ask for any number of scales; an entry forgotten only loses the name
  // of later KV events of that variant, never its blocks.
  if (lora_variants_.size() >= 65536) lora_variants_.clear();
  lora_variants_[v] = ref.id;
  return v;
}

std::string Model::lora_name_of(int32_t key) const {
  if (key == 0) return {};
  const auto it = lora_variants_.find(key);
  const int32_t id = it != lora_variants_.end() ? it->second : key;
  for (const LoraAdapter& a : loras_)
    if (a.id == id) return a.name;
  return {};
}

}  // namespace tessera

#include "models/model.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "models/gguf/gguf.h"
#include "models/safetensors/hf_model.h"

namespace tessera {

Model::~Model() = default;

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
  TS_RETURN_IF_ERROR(flag("tokenizer.ggml.add_space_prefix", &d.add_space_prefix));
  return d;
}

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

// The common tail of both loaders: vocabulary checks, weights, the per-step input buffer.
Status Model::finish_load(const std::string& path, const TensorGetter& get, const LoadOptions& opts) {
  if (cfg_.n_vocab != tokenizer_->vocab_size())
    return InvalidArgument(path + ": the token embedding has " + std::to_string(cfg_.n_vocab) + " rows but the tokenizer has " +
                           std::to_string(tokenizer_->vocab_size()) + " tokens");
  TS_RETURN_IF_ERROR(load_weights(path, get, opts));
  // Per-step input buffer: tokens, positions, slots, logit rows [T]; query_start [S+1];
  // seq_lens [S]; block tables [S, max blocks of a full context].
  const int64_t T = opts.max_batch_tokens, S = opts.max_seqs;
  const int64_t max_blocks = (cfg_.n_ctx_train + 15) / 16 + 1;
  step_capacity_ = size_t(4 * (4 * T + (S + 1) + S + S * max_blocks) + 7 * 256);
  TS_ASSIGN_OR_RETURN(step_buffer_, device_->alloc(step_capacity_));
  return OkStatus();
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, DevicePtr device, const LoadOptions& opts) {
  if (!device) return InvalidArgument("Model::load: no device");
  if (safetensors::is_checkpoint_dir(path)) return load_checkpoint(path, std::move(device), opts);
  std::unique_ptr<Model> m(new Model());
  m->device_ = std::move(device);
  std::shared_ptr<gguf::File> file;
  TS_ASSIGN_OR_RETURN(file, gguf::File::open(path));
  const gguf::File& f = *file;
  TS_ASSIGN_OR_RETURN(m->cfg_, llama_config_from_gguf(f));
  {
    auto td = tokenizer_data_from_gguf(f);
    if (!td.ok()) return td.status().with_context(path + ": tokenizer: ");
    auto tok = Tokenizer::create(std::move(td).value());
    if (!tok.ok()) return tok.status().with_context(path + ": tokenizer: ");
    m->tokenizer_ = std::move(tok).value();
  }
  if (f.find("tokenizer.chat_template")) {
    TS_ASSIGN_OR_RETURN(m->chat_template_, f.get_string("tokenizer.chat_template"));
  }
  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) return NotFound(path + ": tensor 'token_embd.weight' is missing");
  m->cfg_.n_vocab = int(emb->shape[0]);
  m->cfg_.tied_output = f.find_tensor("output.weight") == nullptr;
  // GGUF tensors are used as they are, in place in the mapped file.
  auto get = [&f, file](const TensorSpec& s) -> Result<std::optional<HostTensor>> {
    const gguf::TensorInfo* ti = f.find_tensor(s.name);
    if (!ti) return std::optional<HostTensor>();
    HostTensor h;
    h.dtype = ti->dtype;
    h.shape.assign(ti->shape.begin(), ti->shape.begin() + ti->rank);
    h.data = f.tensor_data(*ti);
    h.nbytes = ti->nbytes;
    h.region = static_cast<const uint8_t*>(h.data) - ti->offset;
    h.region_bytes = f.file_size();
    h.keepalive = f.mapping();
    return std::optional<HostTensor>(std::move(h));
  };
  TS_RETURN_IF_ERROR(m->finish_load(path, get, opts));
  return m;
}

Result<std::unique_ptr<Model>> Model::load_checkpoint(const std::string& dir, DevicePtr device, const LoadOptions& opts) {
  std::unique_ptr<Model> m(new Model());
  m->device_ = std::move(device);
  safetensors::QuantConfig quant;
  TS_ASSIGN_OR_RETURN(m->cfg_, safetensors::read_config(dir, &quant));
  {
    auto td = safetensors::read_tokenizer(dir, &m->chat_template_);
    if (!td.ok()) return td.status();
    auto tok = Tokenizer::create(std::move(td).value());
    if (!tok.ok()) return tok.status().with_context(dir + "/tokenizer.json: ");
    m->tokenizer_ = std::move(tok).value();
  }
  std::unique_ptr<safetensors::Checkpoint> ckpt;
  TS_ASSIGN_OR_RETURN(ckpt, safetensors::Checkpoint::open(dir));
  const safetensors::TensorRef emb = ckpt->find("model.embed_tokens.weight");
  if (!emb.file) return NotFound(dir + ": tensor 'model.embed_tokens.weight' is missing");
  if (emb.info->shape.size() != 2)
    return InvalidArgument(emb.file->path() + ": tensor 'model.embed_tokens.weight' has shape " + emb.info->shape_string() +
                           ", expected [vocab, hidden]");
  m->cfg_.n_vocab = int(emb.info->shape[0]);
  m->cfg_.tied_output = !ckpt->has("lm_head.weight") && !ckpt->has("lm_head.qweight") && !ckpt->has("lm_head.weight_packed");
  safetensors::Weights weights(*ckpt, m->cfg_, quant);
  auto get = [&weights](const TensorSpec& s) { return weights.get(s); };
  TS_RETURN_IF_ERROR(m->finish_load(dir, get, opts));
  return m;
}

Status Model::load_weights(const std::string& path, const TensorGetter& get, const LoadOptions& opts) {
  auto specs = llama_tensor_specs(cfg_, &weights_);
  // Check every tensor's presence, dtype and shape before uploading any.
  size_t total = 0;
  std::vector<std::pair<HostTensor, const TensorSpec*>> todo;
  for (const TensorSpec& s : specs) {
    auto got = get(s);
    if (!got.ok()) return got.status();
    if (!got->has_value()) {
      if (s.required) return NotFound(path + ": tensor '" + s.name + "' is missing");
      continue;
    }
    HostTensor& h = **got;
    if (h.shape != s.shape) {
      std::string want, have;
      for (int64_t d : s.shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      for (int64_t d : h.shape) have += (have.empty() ? "" : ", ") + std::to_string(d);
      return InvalidArgument(path + ": tensor '" + s.name + "' has shape [" + have + "] but the hyperparameters imply [" + want +
                             "]");
    }
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
    Tensor t = Tensor::make(h.dtype, int(h.shape.size()), h.shape.data(), s->name);
    auto it = mapped.find(h.region);
    if (it == mapped.end()) {
      auto b = device_->map_host(h.region, h.region_bytes, h.keepalive);
      it = mapped.emplace(h.region, b.ok() ? *b : nullptr).first;
      if (it->second) weights_buffers_.push_back(it->second);
    }
    if (it->second) {
      t.buffer = it->second;
      t.offset = size_t(static_cast<const uint8_t*>(h.data) - static_cast<const uint8_t*>(h.region));
    } else {
      TS_ASSIGN_OR_RETURN(t.buffer, device_->alloc(h.nbytes));
      TS_RETURN_IF_ERROR(device_->upload(t, h.data, h.nbytes));
    }
    if (h.out_scale != 1.0f) weights_.out_scales[s->name] = h.out_scale;
    *s->slot = std::move(t);
    done += h.nbytes;
    if (opts.progress && !opts.progress(done, total)) return Cancelled(path + ": loading cancelled");
  }
  return OkStatus();
}

std::vector<const Tensor*> Model::weight_tensors() const {
  std::vector<const Tensor*> out;
  auto add = [&](const Tensor& t) {
    if (t.buffer) out.push_back(&t);
  };
  add(weights_.tok_embd);
  add(weights_.output_norm);
  add(weights_.output);
  add(weights_.rope_freqs);
  for (const LlamaLayer& L : weights_.layers) {
    for (const Tensor* t : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.q_norm, &L.k_norm, &L.ffn_norm,
                            &L.w_gate, &L.w_up, &L.w_down, &L.router, &L.gate_exps, &L.up_exps, &L.down_exps, &L.shexp_gate,
                            &L.gate_shexp, &L.up_shexp, &L.down_shexp})
      add(*t);
  }
  return out;
}

Status Model::upload_step(const StepPlan& p, const std::vector<int32_t>& rows, StepTensors* t) {
  const int64_t T = p.n_tokens(), S = p.n_seqs(), R = int64_t(rows.size());
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
    return device_->upload(*dst, data.data(), data.size() * 4);
  };
  TS_RETURN_IF_ERROR(put(&t->tokens, {T}, p.tokens));
  TS_RETURN_IF_ERROR(put(&t->positions, {T}, p.positions));
  TS_RETURN_IF_ERROR(put(&t->slot_mapping, {T}, p.slot_mapping));
  TS_RETURN_IF_ERROR(put(&t->query_start, {S + 1}, p.query_start));
  TS_RETURN_IF_ERROR(put(&t->seq_lens, {S}, p.seq_lens));
  TS_RETURN_IF_ERROR(put(&t->block_tables, {S, p.max_blocks}, p.block_tables));
  TS_RETURN_IF_ERROR(put(&t->logit_rows, {R}, rows));
  return OkStatus();
}

Status Model::forward(const StepPlan& plan, KvCache& kv, std::vector<float>* logits) {
  logits->clear();
  if (plan.n_tokens() == 0) return OkStatus();
  for (int32_t t : plan.tokens)
    if (t < 0 || t >= cfg_.n_vocab) return InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary");
  // A step where nothing samples (a prefill chunk) still runs every layer to fill the KV cache;
  // the graph then computes one logits row, which is discarded.
  const std::vector<int32_t> last_row = {plan.n_tokens() - 1};
  const std::vector<int32_t>& rows = plan.logit_rows.empty() ? last_row : plan.logit_rows;
  StepTensors in;
  TS_RETURN_IF_ERROR(upload_step(plan, rows, &in));
  Graph g;
  const ValueId out = build_llama_graph(g, cfg_, weights_, in, kv);
  TS_RETURN_IF_ERROR(g.status());
  TS_RETURN_IF_ERROR(device_->compute(g));
  if (plan.logit_rows.empty()) return OkStatus();
  const Tensor& lt = g.tensor(out);
  logits->resize(size_t(lt.numel()));
  return device_->download(lt, logits->data(), logits->size() * 4);
}

Result<std::unique_ptr<KvCache>> Model::create_kv_cache(int64_t n_tokens, DType dtype, int block_size) {
  KvCacheConfig kc;
  kc.n_layers = cfg_.n_layers;
  kc.n_kv_heads = cfg_.n_kv_heads;
  kc.head_dim = cfg_.head_dim;
  kc.block_size = block_size;
  kc.n_blocks = int((n_tokens + block_size - 1) / block_size);
  kc.dtype = dtype;
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

// The C API (include/tessera/tessera.h): a thin layer over Model and Engine.
#include "tessera/tessera.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "core/registry.h"
#include "models/chat_template/chat_template.h"
#include "models/model.h"
#include "models/version.h"

struct tessera_model {
  std::unique_ptr<tessera::Model> model;          // null when loaded vocab-only
  std::unique_ptr<tessera::Tokenizer> vocab;      // set when loaded vocab-only
  const tessera::Tokenizer& tokenizer() const { return model ? model->tokenizer() : *vocab; }
};
struct tessera_context {
  tessera_model* model;
  std::unique_ptr<tessera::KvCache> kv;
  int32_t lora = -1;        // tessera_context_set_lora
  float lora_scale = 1.0f;  // tessera_context_set_lora_scaled
};

namespace {
thread_local std::string g_last_error;

tessera_status report(const tessera::Status& s) {
  g_last_error = s.ok() ? std::string() : s.to_string();
  return static_cast<tessera_status>(static_cast<int>(s.code()));
}
tessera_status invalid(const char* what) { return report(tessera::InvalidArgument(what)); }
}  // namespace

static_assert(int(tessera::StatusCode::kInternal) == TESSERA_INTERNAL, "C status codes must mirror StatusCode");

extern "C" {

const char* tessera_last_error(void) { return g_last_error.c_str(); }
const char* tessera_version(void) { return tessera::version_string(); }

tessera_status tessera_model_load(const char* path, const char* device, tessera_model** out) {
  if (!path || !out) return invalid("tessera_model_load: path and out must not be NULL");
  *out = nullptr;
  auto dev = tessera::Registry::global().find(device ? device : "auto");
  if (!dev.ok()) return report(dev.status());
  auto m = tessera::Model::load(path, *dev);
  if (!m.ok()) return report(m.status());
  *out = new tessera_model{std::move(m).value()};
  return report(tessera::OkStatus());
}

tessera_model_params tessera_model_default_params(void) {
  tessera_model_params p{};
  p.struct_size = sizeof(tessera_model_params);
  p.device = nullptr;
  p.n_threads = 0;
  p.n_threads_batch = 0;
  return p;
}

tessera_status tessera_model_load_ex(const char* path, const tessera_model_params* params, tessera_model** out) {
  if (!path || !out) return invalid("tessera_model_load_ex: path and out must not be NULL");
  *out = nullptr;
  tessera_model_params p = tessera_model_default_params();
  if (params) {
    if (params->struct_size < sizeof(uint32_t))
      return invalid("tessera_model_load_ex: params->struct_size must be sizeof(tessera_model_params) (use tessera_model_default_params)");
    // Only the fields the caller's struct has; the rest keep their defaults.
    std::memcpy(&p, params, std::min<size_t>(params->struct_size, sizeof(p)));
    p.struct_size = sizeof(p);
  }
  auto dev = tessera::Registry::global().find(p.device ? p.device : "auto");
  if (!dev.ok()) return report(dev.status());
  if ((p.n_threads != 0 || p.n_threads_batch != 0) && (*dev)->info().threads > 0) {
    auto t = tessera::resolve_cpu_threads({p.n_threads, p.n_threads_batch});
    if (!t.ok()) return report(tessera::InvalidArgument("tessera_model_load_ex: " + t.status().message()));
    *dev = tessera::make_cpu_device(*t);
  }
  auto m = tessera::Model::load(path, *dev);
  if (!m.ok()) return report(m.status());
  *out = new tessera_model{std::move(m).value()};
  return report(tessera::OkStatus());
}

int32_t tessera_model_n_threads(const tessera_model* m) {
  if (!m || !m->model) return 0;
  const tessera::DeviceInfo& i = m->model->device().info();
  return i.threads;
}

tessera_status tessera_model_load_vocab(const char* path, tessera_model** out) {
  if (!path || !out) return invalid("tessera_model_load_vocab: path and out must not be NULL");
  *out = nullptr;
  auto tok = tessera::load_tokenizer(path);
  if (!tok.ok()) return report(tok.status());
  *out = new tessera_model{nullptr, std::move(tok).value()};
  return report(tessera::OkStatus());
}

void tessera_model_free(tessera_model* model) { delete model; }
int32_t tessera_model_vocab_size(const tessera_model* m) {
  return !m ? 0 : m->model ? m->model->vocab_size() : m->vocab->vocab_size();
}
int32_t tessera_model_context_length(const tessera_model* m) { return m && m->model ? m->model->context_length() : 0; }

tessera_status tessera_tokenize(const tessera_model* m, const char* text, int add_special, int32_t* ids, size_t capacity,
                                size_t* n_ids) {
  if (!m || !text || !n_ids || (capacity > 0 && !ids)) return invalid("tessera_tokenize: NULL argument");
  const auto v = m->tokenizer().encode(text, add_special != 0, add_special != 0);
  *n_ids = v.size();
  for (size_t i = 0; i < v.size() && i < capacity; ++i) ids[i] = v[i];
  return report(tessera::OkStatus());
}

tessera_status tessera_model_load_lora(tessera_model* m, const char* name, const char* path, int32_t* slot) {
  if (!m || !name || !path) return invalid("tessera_model_load_lora: model, name and path must not be NULL");
  if (!m->model) return invalid("tessera_model_load_lora: the model was loaded vocab-only (tessera_model_load_vocab)");
  auto s = m->model->add_lora(name, path);
  if (!s.ok()) return report(s.status());
  if (slot) *slot = int32_t(*s);
  return report(tessera::OkStatus());
}

int32_t tessera_model_n_loras(const tessera_model* m) { return m && m->model ? m->model->n_loras() : 0; }

const char* tessera_model_lora_name(const tessera_model* m, int32_t slot) {
  if (!m || !m->model || slot < 0 || slot >= m->model->n_loras()) return nullptr;
  return m->model->loras()[size_t(slot)].name.c_str();
}

tessera_status tessera_context_set_lora(tessera_context* ctx, int32_t slot) {
  if (!ctx) return invalid("tessera_context_set_lora: ctx must not be NULL");
  const int32_t n = ctx->model->model->n_loras();
  if (slot < -1 || slot >= n)
    return report(tessera::InvalidArgument("tessera_context_set_lora: slot " + std::to_string(slot) +
                                           " is not loaded (" + std::to_string(n) +
                                           " adapters; -1 is the base model)"));
  ctx->lora = slot;
  ctx->lora_scale = 1.0f;
  return report(tessera::OkStatus());
}

tessera_status tessera_context_set_lora_scaled(tessera_context* ctx, int32_t slot, float scale) {
  if (!std::isfinite(scale))
    return report(tessera::InvalidArgument("tessera_context_set_lora_scaled: the scale must be a finite number"));
  if (tessera_status st = tessera_context_set_lora(ctx, slot); st != TESSERA_OK) return st;
  ctx->lora_scale = scale;
  return TESSERA_OK;
}

tessera_context_params tessera_context_default_params(void) { return {4096}; }

tessera_status tessera_context_create(tessera_model* model, const tessera_context_params* params, tessera_context** out) {
  if (!model || !out) return invalid("tessera_context_create: model and out must not be NULL");
  *out = nullptr;
  if (!model->model) return invalid("tessera_context_create: the model was loaded vocab-only (tessera_model_load_vocab)");
  const int32_t n = params && params->kv_tokens > 0 ? params->kv_tokens : 4096;
  auto kv = model->model->create_kv_cache(n, tessera::DType::kF16, 16, /*window_memory=*/true);  // an engine's cache
  if (!kv.ok()) return report(kv.status());
  *out = new tessera_context{model, std::move(kv).value()};
  return report(tessera::OkStatus());
}

void tessera_context_free(tessera_context* ctx) { delete ctx; }

tessera_generate_params tessera_generate_default_params(void) {
  return tessera_generate_params{256, 0.8f, 40, 0.95f, 0.05f, 0, 1};
}

tessera_status tessera_generate(tessera_context* ctx, const char* prompt, const tessera_generate_params* params,
                                tessera_token_callback callback, void* user_data) {
  if (!ctx || !prompt) return invalid("tessera_generate: ctx and prompt must not be NULL");
  const tessera_generate_params p = params ? *params : tessera_generate_default_params();
  tessera::Model& model = *ctx->model->model;
  std::string text = prompt;
  if (p.use_chat_template && !model.chat_template().empty()) {
    auto tpl = tessera::ChatTemplate::parse(model.chat_template());
    if (!tpl.ok()) return report(tpl.status());
    std::map<std::string, std::string> extra;
    const auto& tok = model.tokenizer();
    if (tok.bos() >= 0) extra["bos_token"] = tok.token_to_piece(tok.bos());
    if (tok.eos() >= 0) extra["eos_token"] = tok.token_to_piece(tok.eos());
    auto r = tpl->render({{"user", prompt}}, true, extra);
    if (!r.ok()) return report(r.status());
    text = *r;
  }
  tessera::GenerationRequest req;
  req.prompt = model.tokenizer().encode(text, true, true);
  req.max_tokens = p.max_tokens > 0 ? p.max_tokens : 256;
  req.sampling.temperature = p.temperature;
  req.sampling.top_k = p.top_k;
  req.sampling.top_p = p.top_p;
  req.sampling.min_p = p.min_p;
  req.sampling.seed = p.seed;
  req.lora = ctx->lora;
  req.lora_scale = ctx->lora_scale;
  tessera::Engine engine(model, *ctx->kv, model.codec());
  tessera::RequestId id = 0;
  bool stop = false;
  std::string error;
  req.on_token = [&](const tessera::TokenEvent& ev) {
    if (ev.finish == tessera::FinishReason::kError) error = ev.error;
    // Every generated token is reported, with or without text, so that a caller can recover the
    // token ids; a finish event only when it flushes held-back text.
    if (ev.token < 0 && ev.text.empty()) return;
    if (!stop && callback && callback(ev.text.data(), ev.text.size(), ev.token, user_data) != 0) stop = true;
  };
  auto sub = engine.submit(std::move(req));
  if (!sub.ok()) return report(sub.status());
  id = *sub;
  while (!engine.idle()) {
    if (stop) engine.cancel(id);
    const tessera::Status s = engine.step();
    if (!s.ok()) return report(s);
  }
  if (!error.empty()) return report(tessera::Internal(error));
  return report(tessera::OkStatus());
}

}  // extern "C"

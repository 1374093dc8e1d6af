// tessera embed: sentence embeddings of each text argument, printed as JSON. Every text is one
// embedding request through the engine (prefill only, batched into steps, KV freed at once).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/sched/engine.h"
#include "examples/cli/commands.h"
#include "examples/cli/common.h"

namespace tessera::cli {

namespace {

struct EmbedOptions {
  ModelOptions model;
  std::vector<std::string> texts;
  std::string pooling;  // "" : the model's own
};

Result<Pooling> pooling_from_name(const std::string& s) {
  if (s == "mean") return Pooling::kMean;
  if (s == "cls") return Pooling::kCls;
  if (s == "last") return Pooling::kLast;
  return InvalidArgument("unknown --pooling '" + s + "' (mean, cls, last)");
}

Status embed_texts(Model& model, const EmbedOptions& o, std::vector<std::vector<float>>* out,
                   std::vector<int32_t>* n_tokens) {
  const auto kvt = dtype_from_name(o.model.kv_dtype);
  if (!kvt) return InvalidArgument("unknown --kv-dtype '" + o.model.kv_dtype + "'");
  TS_ASSIGN_OR_RETURN(auto kv, model.create_kv_cache(o.model.ctx, *kvt, 16, !o.model.swa_full));
  Engine engine(model, *kv, model.codec());
  out->assign(o.texts.size(), {});
  n_tokens->assign(o.texts.size(), 0);
  std::string error;
  for (size_t i = 0; i < o.texts.size(); ++i) {
    GenerationRequest req;
    req.embed = true;
    req.prompt = model.tokenizer().encode(o.texts[i], /*add_special=*/true, /*parse_special=*/false);
    (*n_tokens)[i] = int32_t(req.prompt.size());
    req.on_token = [out, i, &error](const TokenEvent& ev) {
      if (ev.finish == FinishReason::kError) error = ev.error;
      if (ev.finish != FinishReason::kNone) (*out)[i] = ev.embedding;
    };
    auto id = engine.submit(std::move(req));
    if (!id.ok()) return id.status().with_context("text " + std::to_string(i) + ": ");
  }
  TS_RETURN_IF_ERROR(engine.run_until_idle());
  if (!error.empty()) return Internal(error);
  return OkStatus();
}

void embed_command(const EmbedOptions& o) {
  if (o.texts.empty()) return fail(InvalidArgument("no text to embed: pass one or more texts"));
  auto model = load_model(o.model);
  if (!model) return;
  if (!o.pooling.empty()) {
    auto p = pooling_from_name(o.pooling);
    if (!p.ok()) return fail(p.status());
    if (Status s = model->set_pooling(*p); !s.ok()) return fail(s);
  }
  std::vector<std::vector<float>> vecs;
  std::vector<int32_t> n_tokens;
  if (Status s = embed_texts(*model, o, &vecs, &n_tokens); !s.ok()) return fail(s);
  std::printf("{\"model\": \"%s\", \"pooling\": \"%s\", \"dim\": %d, \"data\": [", model->config().arch.c_str(),
              pooling_name(model->config().pooling), model->embedding_dim());
  for (size_t i = 0; i < vecs.size(); ++i) {
    std::printf("%s\n  {\"index\": %zu, \"tokens\": %d, \"embedding\": [", i ? "," : "", i, n_tokens[i]);
    for (size_t j = 0; j < vecs[i].size(); ++j) std::printf("%s%.9g", j ? ", " : "", double(vecs[i][j]));
    std::printf("]}");
  }
  std::printf("\n]}\n");
}

}  // namespace

void add_embed_command(CLI::App& app) {
  auto o = std::make_shared<EmbedOptions>();
  o->model.kv_dtype = "f32";  // the K/V an encoder reads back within the same step: keep them exact
  auto* cmd = app.add_subcommand("embed", "Print the pooled, normalised embedding of each text (JSON)");
  add_model_options(cmd, &o->model);
  add_thread_options(cmd, &o->model.threads, &o->model.threads_batch);
  cmd->add_option("texts", o->texts, "texts to embed, one embedding each");
  cmd->add_option("--pooling", o->pooling,
                  "mean, cls or last (default: the model's own; decoders need one)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->callback([o] { embed_command(*o); });
}

}  // namespace tessera::cli

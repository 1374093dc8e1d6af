#include "tests/api/reference.h"

#include <cstdlib>
#include <filesystem>

#include "core/registry.h"
#include "core/sched/engine.h"
#include "models/model.h"
#include "tests/support/peft_writer.h"
#include "tests/support/test_support.h"

namespace tessera::testing {

Result<GreedyOutput> engine_greedy(const std::string& model_path, const std::string& text, int max_tokens,
                                   int kv_tokens, const std::string& lora_dir) {
  TS_ASSIGN_OR_RETURN(DevicePtr cpu, Registry::global().find("cpu"));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(model_path, cpu));
  if (!lora_dir.empty()) TS_RETURN_IF_ERROR(model->add_lora("adapter", lora_dir).status());
  TS_ASSIGN_OR_RETURN(std::unique_ptr<KvCache> kv, model->create_kv_cache(kv_tokens));
  Engine engine(*model, *kv, model->codec());
  GenerationRequest r;
  r.prompt = model->tokenizer().encode(text, true, true);
  r.sampling = SamplingParams::greedy();
  r.max_tokens = max_tokens;
  r.lora = lora_dir.empty() ? -1 : 0;
  GreedyOutput out;
  std::string error;
  r.on_token = [&](const TokenEvent& ev) {
    if (ev.token >= 0) out.tokens.push_back(ev.token);
    out.text += ev.text;
    if (ev.finish == FinishReason::kError) error = ev.error;
  };
  TS_RETURN_IF_ERROR(engine.submit(std::move(r)).status());
  TS_RETURN_IF_ERROR(engine.run_until_idle());
  if (!error.empty()) return Internal("engine_greedy: " + error);
  return out;
}

Status write_random_adapter(const std::string& model_path, const std::string& dir, uint32_t seed) {
  TS_ASSIGN_OR_RETURN(DevicePtr cpu, Registry::global().find("cpu"));
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::load(model_path, cpu));
  write_peft_adapter(dir, 8, 16.0, false, kAllLlamaTargets,
                     random_peft_adapter(model->config(), 8, kAllLlamaModules, seed));
  return OkStatus();
}

namespace {
// The tiny model's folder: written on first use, removed at exit.
struct TinyModelDir {
  TinyModelDir() : dir(process_temp_dir("tessera_capi")), path(dir + "/tiny-llama-f32.gguf") {
    failed = run_make_tiny_model("--arch llama --dtype f32 --seed 5 --out " + path);
  }
  ~TinyModelDir() { std::filesystem::remove_all(dir); }
  std::string dir, path, failed;
};
}  // namespace

std::string tiny_model_path(std::string* error) {
  static const TinyModelDir tiny;
  *error = tiny.failed.empty() ? std::string() : "failed: " + tiny.failed;
  return tiny.failed.empty() ? tiny.path : std::string();
}

std::string smollm2_path() {
  const char* dir = std::getenv("TESSERA_MODELS");
  return std::string(dir ? dir : "models-cache") + "/SmolLM2-135M-Instruct.Q4_1.gguf";
}

}  // namespace tessera::testing

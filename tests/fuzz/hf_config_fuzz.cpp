// libFuzzer target for a checkpoint's config.json (safetensors::read_config,
// models/safetensors/hf_config.cpp), and the tensor list the loader derives from the config
// before it touches any tensor (llama_tensor_specs). An accepted config must hold what the rest
// of the loader relies on: positive sizes (an FFN width unless every layer is a mixture of
// experts), whole GQA groups, an even head dim, rotary dims within the head, and a valid expert
// count.
#include <cstdint>

#include "models/arch/registry.h"
#include "models/safetensors/hf_model.h"
#include "tests/fuzz/fuzz_util.h"

namespace tessera {
namespace {

void check(const ModelConfig& c) {
  if (c.n_layers <= 0 || c.n_embd <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.n_ctx_train <= 0)
    fuzz::fail("a non-positive size was accepted");
  // A mixture of experts may have no dense FFN width (Qwen3.5-MoE's config.json has no
  // intermediate_size); a dense model must have one.
  if (c.n_ff < 0 || (c.n_ff == 0 && !c.is_moe())) fuzz::fail("a dense model without an FFN width was accepted");
  if (c.n_heads % c.n_kv_heads) fuzz::fail("heads not a multiple of kv heads accepted");
  if (c.head_dim <= 0 || c.head_dim % 2) fuzz::fail("bad head_dim accepted");
  if (c.rope.n_dims <= 0 || c.rope.n_dims > c.head_dim || c.rope.n_dims % 2) fuzz::fail("bad rotary dims accepted");
  if (c.is_moe() && (c.n_experts_used < 1 || c.n_experts_used > c.n_experts || c.n_ff_exp <= 0))
    fuzz::fail("bad expert counts accepted");
  if (!(c.rms_eps > 0)) fuzz::fail("non-positive rms_norm_eps accepted");
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  static const std::string dir = [] {
    const std::string d = fuzz::scratch_dir() + "/cfg";
    std::filesystem::create_directories(d);
    return d;
  }();
  fuzz::write_file(dir + "/config.json", std::string_view(reinterpret_cast<const char*>(data), size));
  safetensors::QuantConfig quant;
  auto cfg = safetensors::read_config(dir, &quant);
  fuzz::note("config.json", cfg.status());
  if (!cfg.ok()) return 0;
  check(*cfg);
  // The loader builds the specs only for as many layers as the checkpoint has tensors
  // (Model::load_checkpoint), so a fuzzed layer count is bounded the same way here.
  if (cfg->n_layers > 1024) return 0;
  auto arch = ArchRegistry::get(cfg->arch);
  if (!arch.ok()) tessera::fuzz::fail("read_config accepted an architecture the registry does not build");
  const auto w = (*arch)->new_weights();
  const auto specs = (*arch)->tensor_specs(*cfg, w.get());
  if (specs.empty()) tessera::fuzz::fail("no tensor specs for an accepted config");
  return 0;
}

#include "examples/cli/common.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/registry.h"
#include "examples/cli/commands.h"
#include "models/chat_template/chat_template.h"

namespace tessera::cli {

void fail(const std::string& message, int code) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  set_exit_code(code);
}
void fail(const Status& s) { fail(s.to_string(), s.code() == StatusCode::kInvalidArgument ? 2 : 1); }

std::string default_model_path() {
  if (const char* env = std::getenv("TESSERA_MODEL"); env && *env) return env;
  namespace fs = std::filesystem;
  const char* name = "models-cache/SmolLM2-135M-Instruct.Q4_1.gguf";
  std::error_code ec;
  fs::path dir = fs::current_path(ec);
  for (int i = 0; i < 4 && !dir.empty(); ++i, dir = dir.parent_path())
    if (fs::exists(dir / name, ec)) return (dir / name).string();
  // Beside the binary's checkout: build/bin/tessera -> ../../models-cache
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (int i = 0; i < 4 && !exe.empty(); ++i) {
    exe = exe.parent_path();
    if (fs::exists(exe / name, ec)) return (exe / name).string();
  }
  return name;
}

void add_model_options(CLI::App* cmd, ModelOptions* o) {
  o->model = default_model_path();
  cmd->add_option("-m,--model", o->model, "GGUF model file, or a Hugging Face checkpoint directory")->capture_default_str();
  cmd->add_option("-d,--device", o->device, "device: auto (the best found), cpu, vulkan, vulkan:1, cuda:0 ..., reference (scalar reference ops, slow)")
      ->capture_default_str();
  cmd->add_option("-c,--ctx", o->ctx, "KV cache capacity in tokens")->capture_default_str()->check(CLI::Range(16, 1 << 24));
  cmd->add_option("--kv-dtype", o->kv_dtype, "KV cache dtype: f16, bf16, f32, fp8_e4m3 or int8_pc (8-bit: an f32 scale per token and kv head)")->capture_default_str();
  cmd->add_option("--act-dtype", o->act_dtype, "activation dtype: auto (the device's preference: f32 on cpu and vulkan), f32, f16 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "f16", "bf16"}));
  cmd->add_flag("--swa-full", o->swa_full,
                "sliding-window layers keep the K/V of the whole context (default: only their window's, in a pool of their own)");
  cmd->add_option("--lora", o->loras,
                  "NAME=PATH: a LoRA adapter, a PEFT folder (adapter_config.json, adapter_model.safetensors) or a "
                  "llama.cpp GGUF adapter file; repeatable, each in the next slot; the first applies to every "
                  "sequence (docs/lora.md)")
      ->allow_extra_args(false);
  cmd->add_option("--lora-scale", o->lora_scale,
                  "the applied (first) adapter's scale, times its own (llama.cpp's --lora-scaled; 0: the base model)")
      ->capture_default_str()
      ->check(CLI::Range(-100.0, 100.0));
  add_placement_options(cmd, &o->placement);
  cmd->add_flag("-q,--quiet", o->quiet, "no progress bar");
}

void add_tp_option(CLI::App* cmd, int* tp) {
  cmd->add_option(
         "--tp", *tp,
         "tensor parallelism over N ranks, one process each: mpirun -n N tessera ... --tp N (each holds 1/N of "
         "the heads and FFN rows; rank 0 plans and answers, the others follow; docs/multi-device.md)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
}

Result<std::shared_ptr<Communicator>> tensor_parallel_comm(int tp) {
  if (tp <= 1) return std::shared_ptr<Communicator>();
  TS_ASSIGN_OR_RETURN(auto comm, open_communicator());
  if (comm->size() != tp)
    return InvalidArgument("--tp " + std::to_string(tp) + " but this process is one of " +
                           std::to_string(comm->size()) + " ranks: launch it as `mpirun -n " + std::to_string(tp) +
                           " tessera ... --tp " + std::to_string(tp) + "`");
  return comm;
}

int threads_per_rank(int threads, int tp) {
  if (threads > 0 || tp <= 1) return threads;
  return std::max(1, int(std::thread::hardware_concurrency()) / tp);
}

void add_placement_options(CLI::App* cmd, PlacementFlags* f) {
  cmd->add_option(
         "--gpu-layers,--n-gpu-layers", f->gpu_layers,
         "N: only the last N layers (weights and KV) on --device, the rest and the token embedding on the CPU; "
         "N = layers + 1 also puts the output head there; -1: everything (llama.cpp's -ngl; "
         "docs/multi-device.md). Default on a GPU: the whole model if it fits its free memory with --ctx "
         "tokens of KV, else the last layers that do")
      ->check(CLI::Range(-1, 1 << 20));
  cmd->add_flag("--cpu-moe", f->cpu_moe,
                "the routed experts' weights on the CPU, attention on --device (llama.cpp's --cpu-moe)");
  cmd->add_option("--override-tensor", f->overrides,
                  "PATTERN=DEVICE: weights whose GGUF name matches the regex PATTERN on DEVICE (cpu or --device's id), "
                  "before --gpu-layers and --cpu-moe apply; repeatable (llama.cpp's -ot)")
      ->allow_extra_args(false);
}

std::string placement_summary(const Model& m) {
  std::string bytes;
  for (const auto& [dev, b] : m.weight_bytes_per_device())
    bytes += (bytes.empty() ? "" : ", ") + std::to_string(b / 1000000) + " MB on " + dev->info().id;
  return m.placement().describe(m.config().n_layers) + " (weights: " + bytes + ")";
}

Result<PlacementOptions> placement_options(const PlacementFlags& f, const DevicePtr& main, int threads,
                                           int threads_batch, bool quiet, int64_t kv_tokens) {
  PlacementOptions p;
  if (!f.any()) {
    const DeviceInfo& i = main->info();
    if ((i.type != DeviceType::kGpu && i.type != DeviceType::kIntegratedGpu) || i.emulated) return p;
    // A real GPU: the whole model when it fits, else the layers that do (llama.cpp's --fit).
    TS_ASSIGN_OR_RETURN(p.host, find_device("cpu", threads, threads_batch, quiet));
    p.main_layers = kFitLayers;
    p.fit_kv_tokens = kv_tokens;
    return p;
  }
  if (main->info().type == DeviceType::kCpu)
    return InvalidArgument(
        "--gpu-layers, --cpu-moe and --override-tensor split a model between a GPU and the CPU, but "
        "--device is " +
        main->info().id + " (give --device vulkan, cuda:0 ...)");
  TS_ASSIGN_OR_RETURN(p.host, find_device("cpu", threads, threads_batch, quiet));
  p.main_layers = f.gpu_layers == -2 ? -1 : f.gpu_layers;
  p.experts_on_host = f.cpu_moe;
  for (const std::string& o : f.overrides) {
    const size_t eq = o.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == o.size())
      return InvalidArgument("--override-tensor '" + o + "': expected PATTERN=DEVICE (e.g. exps=cpu)");
    p.overrides.push_back({o.substr(0, eq), o.substr(eq + 1)});
  }
  return p;
}

bool load_loras(const std::vector<std::string>& specs, Model& m, const LoraLoadOptions& lo) {
  for (const std::string& spec : specs) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      fail("--lora wants NAME=PATH, got '" + spec + "'", 2);
      return false;
    }
    auto slot = m.add_lora(spec.substr(0, eq), spec.substr(eq + 1), lo.limits);
    if (!slot.ok()) {
      fail(slot.status());
      return false;
    }
    const LoraAdapter& a = m.loras()[size_t(*slot)];
    if (!lo.quiet)
      std::fprintf(stderr, "lora: %s (rank %d, alpha %g%s, scale %g, %zu modules) in slot %d%s\n", a.name.c_str(),
                   a.rank, a.alpha, a.rslora ? ", rsLoRA" : "", double(a.scale), a.modules.size(), *slot,
                   *slot == 0 && lo.first_is_default ? ", applied" : "");
  }
  if (!specs.empty() && lo.first_is_default) {
    const Status s = m.set_default_lora(0, lo.default_scale);
    if (!s.ok()) {
      fail(s);
      return false;
    }
  }
  return true;
}

void add_thread_options(CLI::App* cmd, int* threads, int* threads_batch) {
  // NOTE: 0 and negatives are refused here (CLI11 names the option and the range); a count
  // above the CPUs is clamped with a note by find_device.
  cmd->add_option("-t,--threads", *threads,
                  "CPU threads for decode (default: TESSERA_THREADS, else the physical cores; under load from other "
                  "programs the pool uses fewer, TESSERA_CPU_ADAPT=0 keeps them all)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads-batch", *threads_batch, "CPU threads for prefill (default: as --threads)")
      ->check(CLI::Range(1, 1 << 20));
}

Result<DevicePtr> find_device(const std::string& spec, int threads, int threads_batch, bool quiet) {
  TS_ASSIGN_OR_RETURN(DevicePtr dev, Registry::global().find(spec));
  if (threads == 0 && threads_batch == 0) return dev;
  if (dev->info().threads == 0) {
    if (!quiet) std::fprintf(stderr, "note: --threads/--threads-batch apply to the CPU device only; %s ignores them\n", dev->info().id.c_str());
    return dev;
  }
  std::string note;
  TS_ASSIGN_OR_RETURN(CpuThreadOptions t, resolve_cpu_threads({threads, threads_batch}, &note));
  if (!note.empty()) std::fprintf(stderr, "note: %s\n", note.c_str());
  return make_cpu_device(t);
}

std::string thread_report(const Device& d) { return cpu_thread_summary(d); }

void add_sampling_options(CLI::App* cmd, SamplingParams* p) {
  cmd->add_option("--temp", p->temperature, "temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", p->top_k, "top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", p->top_p, "top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", p->min_p, "min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", p->repetition_penalty, "repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--seed", p->seed, "random seed (0: random)")->capture_default_str();
}

namespace {
struct ProgressBar {
  bool enabled;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  int last_percent = -1;
  void draw(size_t done, size_t total) {
    if (!enabled || total == 0) return;
    const int pct = int(100.0 * double(done) / double(total));
    if (pct == last_percent) return;
    last_percent = pct;
    const int width = 30, filled = pct * width / 100;
    std::string bar(size_t(filled), '#');
    bar.resize(size_t(width), '.');
    std::fprintf(stderr, "\rloading [%s] %3d%%  %.0f / %.0f MB", bar.c_str(), pct, double(done) / 1e6, double(total) / 1e6);
    if (done >= total) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "  (%.2f s)\n", s);
    }
    std::fflush(stderr);
  }
};
}  // namespace

LoadOptions load_options(const ModelOptions& o, const LoadOptions& extra) {
  LoadOptions lo = extra;
  if (o.act_dtype != "auto") lo.activation_dtype = dtype_from_name(o.act_dtype);
  return lo;
}

std::unique_ptr<Model> load_model(const ModelOptions& opts, const LoadOptions& extra) {
  auto comm = tensor_parallel_comm(opts.tp);
  if (!comm.ok()) {
    fail(comm.status());
    return nullptr;
  }
  ModelOptions o = opts;
  o.quiet = o.quiet || (*comm && (*comm)->rank() > 0);  // rank 0 speaks for all
  o.threads = threads_per_rank(o.threads, o.tp);
  auto dev = find_device(o.device, o.threads, o.threads_batch, o.quiet);
  if (!dev.ok()) { fail(dev.status()); return nullptr; }
  ProgressBar bar{!o.quiet && isatty(2)};
  LoadOptions lo = load_options(o, extra);
  lo.comm = *comm;
  lo.progress = [&bar](size_t done, size_t total) { bar.draw(done, total); return true; };
  auto placed = placement_options(o.placement, *dev, o.threads, o.threads_batch, o.quiet, o.ctx);
  if (!placed.ok()) {
    fail(placed.status());
    return nullptr;
  }
  lo.placement = *std::move(placed);
  auto m = Model::load(o.model, *dev, lo);
  if (!m.ok()) { fail(m.status()); return nullptr; }
  if (!load_loras(o.loras, **m, {.first_is_default = true, .default_scale = o.lora_scale, .quiet = o.quiet}))
    return nullptr;
  if (!o.quiet)
    std::fprintf(stderr, "model: %s (%s, %d layers, %d tokens context) on %s\n",
                 (*m)->config().name.empty() ? o.model.c_str() : (*m)->config().name.c_str(), (*m)->config().arch.c_str(),
                 (*m)->config().n_layers, (*m)->config().n_ctx_train, (*dev)->info().name.c_str());
  if (!o.quiet && (*m)->placement().split()) std::fprintf(stderr, "model: placed %s\n", placement_summary(**m).c_str());
  if (!o.quiet && (*m)->tp_size() > 1)
    std::fprintf(stderr, "model: tensor-parallel over %d ranks (%s): %d of %d heads and 1/%d of the FFN rows on each\n",
                 (*m)->tp_size(), (*comm)->backend().c_str(), (*m)->rank_config().n_heads, (*m)->config().n_heads,
                 (*m)->tp_size());
  if (!o.quiet && (*m)->activation_dtype() != DType::kF32)
    std::fprintf(stderr, "model: %s activations\n", dtype_name((*m)->activation_dtype()));
  if (!o.quiet && (*m)->prepared_weight_bytes() > 0)
    std::fprintf(stderr,
                 "model: %.1f MB of weights repacked into %s own layout (file pages of replaced weights released)\n",
                 double((*m)->prepared_weight_bytes()) / 1e6,
                 (*m)->placement().split() ? "their devices'" : ((*dev)->info().id + "'s").c_str());
  return std::move(m).value();
}

Result<std::string> apply_chat_template(const Model& m, const std::vector<std::pair<std::string, std::string>>& turns,
                                        bool add_generation_prompt) {
  if (m.chat_template().empty()) {
    std::string raw;
    for (const auto& t : turns) raw += t.second;
    return raw;
  }
  TS_ASSIGN_OR_RETURN(auto tpl, ChatTemplate::parse(m.chat_template()));
  std::vector<ChatMessage> msgs;
  for (const auto& [role, content] : turns) msgs.push_back({role, content});
  const Tokenizer& tok = m.tokenizer();
  std::map<std::string, std::string> extra;
  if (tok.bos() >= 0) extra["bos_token"] = tok.token_to_piece(tok.bos());
  if (tok.eos() >= 0) extra["eos_token"] = tok.token_to_piece(tok.eos());
  return tpl.render(msgs, add_generation_prompt, extra);
}

}  // namespace tessera::cli

// Options and helpers shared by the CLI subcommands.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/sched/sampler.h"
#include "models/model.h"

namespace tessera::cli {

// --gpu-layers, --cpu-moe, --override-tensor (add_placement_options).
struct PlacementFlags {
  int gpu_layers = -2;  // -2: not given
  bool cpu_moe = false;
  std::vector<std::string> overrides;  // PATTERN=DEVICE

  bool any() const { return gpu_layers != -2 || cpu_moe || !overrides.empty(); }
};
// Adds --gpu-layers, --cpu-moe and --override-tensor to |cmd| (add_model_options calls it).
void add_placement_options(CLI::App* cmd, PlacementFlags* f);
// "layers 0-14 on cpu, ... (weights: 63 MB on cpu, 33 MB on vulkan:0)": a split model's placement
// (run's banner and --stats).
std::string placement_summary(const Model& m);
// The placement |f| asks for with |main| as the main device: the CPU (with the given thread
// counts) takes the rest. Without flags, on a GPU that is not emulated, the model is fitted to
// its free memory with room for |kv_tokens| of KV (kFitLayers: one device when it fits).
// Errors: a main device that is the CPU, a malformed PATTERN=DEVICE.
Result<PlacementOptions> placement_options(const PlacementFlags& f, const DevicePtr& main, int threads,
                                           int threads_batch, bool quiet, int64_t kv_tokens = 0);

struct ModelOptions {
  std::string model;          // path to a .gguf or a checkpoint directory
  std::string device = "auto";
  int ctx = 4096;             // KV cache capacity in tokens
  std::string kv_dtype = "f16";
  std::string act_dtype = "auto";  // activations: auto (the device's preference), f32, f16, bf16
  bool quiet = false;         // no progress bar
  bool swa_full = false;      // sliding-window layers keep every token (no window pool)
  // CPU threads (add_thread_options): 0 = the default (TESSERA_THREADS, else the physical cores).
  int threads = 0;            // decode
  int threads_batch = 0;      // prefill (0: as threads)
  // --lora NAME=PATH (repeatable): PEFT folders or GGUF adapter files loaded into slots 0, 1, ...;
  // the first applies.
  std::vector<std::string> loras;
  float lora_scale = 1.0f;  // --lora-scale: the applied adapter's, times its own
  // A model across --device and the CPU (docs/multi-device.md): llama.cpp's -ngl, --cpu-moe, -ot.
  PlacementFlags placement;
  int tp = 1;  // --tp N: tensor parallelism over N ranks (mpirun -n N; docs/multi-device.md)
};

// Loads --lora NAME=PATH adapters into |m|, slot after slot. Errors are printed (false).
struct LoraLoadOptions {
  bool first_is_default = false;  // run/chat: the first applies to every sequence; serve: none does
  float default_scale = 1.0f;     // with first_is_default: its scale, times its own
  bool quiet = false;
  LoraLimits limits;
};
bool load_loras(const std::vector<std::string>& specs, Model& m, const LoraLoadOptions& lo);

// Adds -m/--model, -d/--device, -c/--ctx, --kv-dtype, --act-dtype, --swa-full, --lora, -q/--quiet to |cmd|.
void add_model_options(CLI::App* cmd, ModelOptions* o);
// Adds -t/--threads and --threads-batch (run, chat, serve, perplexity, embed) binding to
// |threads| and |threads_batch| (counts >= 1; 0 stays "the default").
void add_thread_options(CLI::App* cmd, int* threads, int* threads_batch);
// The device |spec| names; for a CPU device with thread counts given, a new CPU device with them
// (clamps printed to stderr unless |quiet|). Errors: an unknown device, a bad count.
Result<DevicePtr> find_device(const std::string& spec, int threads, int threads_batch, bool quiet);
// --tp N (run, serve): adds the option; then this process's communicator as one of N ranks
// (null for N = 1), refused by name when the process was not launched as N ranks.
void add_tp_option(CLI::App* cmd, int* tp);
Result<std::shared_ptr<Communicator>> tensor_parallel_comm(int tp);
// Threads per rank when |tp| ranks share this machine and none were asked for: its CPUs split
// evenly (|threads| itself otherwise).
int threads_per_rank(int threads, int tp);
// One line for --stats and info: the CPU's thread counts and whether its pool shrank under load
// ("" for other devices).
std::string thread_report(const Device& d);

// Adds --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed.
void add_sampling_options(CLI::App* cmd, SamplingParams* p);

// The default model: $TESSERA_MODEL, else models-cache/SmolLM2-135M-Instruct.Q4_1.gguf beside
// the working directory or the binary's checkout.
std::string default_model_path();

// Loads the model on the chosen device, drawing a progress bar on stderr. Errors are printed.
// |extra| with what |o| says about loading (the activation dtype).
LoadOptions load_options(const ModelOptions& o, const LoadOptions& extra = {});
std::unique_ptr<Model> load_model(const ModelOptions& o, const LoadOptions& extra = {});

// Prints "error: <message>" to stderr and sets the exit code.
void fail(const std::string& message, int code = 1);
void fail(const Status& s);

// Renders |prompt| as one user turn with the model's chat template (plus an optional system
// prompt); falls back to the raw prompt when the model has no template.
Result<std::string> apply_chat_template(const Model& m, const std::vector<std::pair<std::string, std::string>>& turns,
                                        bool add_generation_prompt);

}  // namespace tessera::cli

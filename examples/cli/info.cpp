// `tessera info`: the devices found and, for each backend compiled in but unusable, why.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/registry.h"
#include "models/arch/registry.h"
#include "models/arch/sequence_memory.h"
#include "models/gguf/gguf.h"
#include "models/safetensors/hf_model.h"
#include "examples/cli/commands.h"
#include "examples/cli/common.h"

namespace tessera::cli {

namespace {
int g_exit_code = 0;

void print_devices() {
  const Registry& reg = Registry::global();
  const auto best = reg.best();
  std::printf("Devices:\n");
  for (const DeviceEntry& e : reg.entries()) {
    if (e.device) {
      const DeviceInfo& i = e.device->info();
      const std::string note = e.device == best ? "  [default]"
                               : i.by_name_only ? "  (only by name: --device " + i.id + ")"
                                                : "";
      std::printf("  %-10s %s%s\n", i.id.c_str(), i.name.c_str(), note.c_str());
      std::printf("  %-10s type: %s (%s backend%s)\n", "", device_type_name(i.type), i.backend.c_str(),
                  i.emulated ? ", emulated on the CPU" : "");
      if (!i.features.empty()) std::printf("  %-10s features: %s\n", "", i.features.c_str());
      if (const std::string t = cpu_thread_summary(*e.device); !t.empty())
        std::printf("  %-10s threads: %s (%s; -t/--threads on run, chat, serve, perplexity, embed)\n", "", t.c_str(),
                    cpu_topology_summary().c_str());
      if (i.memory_bytes) std::printf("  %-10s memory: %.1f GiB%s\n", "", double(i.memory_bytes) / (1 << 30),
                                      i.emulated ? " (emulated on the CPU; never chosen by default)" : "");
    } else {
      std::printf("  %-10s unavailable: %s\n", e.id.c_str(), e.why.message().c_str());
    }
  }
  for (const std::string& b : backends_not_built())
    std::printf("  %-10s not built: this binary was configured without the %s backend\n", b.c_str(), b.c_str());
  std::printf("Architectures (GGUF): %s\n", ArchRegistry::gguf_name_list().c_str());
  std::printf("Architectures (config.json model_type): %s\n", ArchRegistry::hf_model_type_list().c_str());
}
}  // namespace

std::string value_string(const gguf::Value& v) {
  using T = gguf::ValueType;
  switch (v.type) {
    case T::kString: return v.s.size() > 120 ? "\"" + v.s.substr(0, 117) + "...\" (" + std::to_string(v.s.size()) + " bytes)" : "\"" + v.s + "\"";
    case T::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < v.array.size() && i < 4; ++i) out += (i ? ", " : "") + value_string(v.array[i]);
      if (v.array.size() > 4) out += ", ... (" + std::to_string(v.array.size()) + " items)";
      return out + "]";
    }
    case T::kBool: return v.b ? "true" : "false";
    case T::kF32:
    case T::kF64: return std::to_string(v.f);
    case T::kU8: case T::kU16: case T::kU32: case T::kU64: return std::to_string(v.u);
    default: return std::to_string(v.i);
  }
}

namespace {
struct MemoryOptions {
  std::vector<int64_t> contexts;  // extra context lengths (--context)
  std::string kv_dtype = "f16";
  std::string device = "auto";  // with placement flags: the main device of the placement table
  PlacementFlags placement;
};

// With --gpu-layers / --cpu-moe / --override-tensor: where each weight of |f| would be loaded,
// as bytes per device (from the tensor table; nothing is loaded).
void print_placement(const gguf::File& f, int n_layers, const MemoryOptions& mo) {
  if (!mo.placement.any()) return;
  auto dev = find_device(mo.device, 0, 0, true);
  if (!dev.ok()) return fail(dev.status());
  auto opts = placement_options(mo.placement, *dev, 0, 0, true);
  if (!opts.ok()) return fail(opts.status());
  auto pl = Placement::resolve(*opts, *dev, n_layers);
  if (!pl.ok()) return fail(pl.status());
  std::map<std::string, uint64_t> bytes;
  for (const auto& t : f.tensors())
    bytes[pl->tensor_device(t.name, t.name.find("_exps") != std::string::npos).info().id] += t.nbytes;
  std::printf("placement: %s\n", pl->describe(n_layers).c_str());
  for (const auto& [id, b] : bytes) std::printf("  %-10s %9.1f MB of weights\n", id.c_str(), double(b) / 1e6);
}

// One sequence's memory at a few context lengths (4k, 32k, the trained context, --context), by
// kind of layer: the attention layers' K/V grows with the context, a recurrent state does not.
void print_sequence_memory(const Architecture& arch, const ModelConfig& c, const MemoryOptions& mo) {
  const auto kv = dtype_from_name(mo.kv_dtype);
  if (!kv) {
    std::fprintf(stderr, "error: --kv-dtype %s: not a dtype\n", mo.kv_dtype.c_str());
    set_exit_code(1);
    return;
  }
  std::vector<int64_t> lens = {4096, 32768};
  if (c.n_ctx_train > 0) lens.push_back(c.n_ctx_train);
  for (int64_t n : mo.contexts)
    if (n > 0) lens.push_back(n);
  std::sort(lens.begin(), lens.end());
  lens.erase(std::unique(lens.begin(), lens.end()), lens.end());
  const SequenceMemory first = sequence_memory(arch, c, lens.front(), *kv);
  std::printf("memory per sequence (K/V %s in blocks of 16 tokens; MiB):\n", dtype_name(*kv));
  std::printf("  layers: %d full attention, %d sliding window%s, %d sharing an earlier layer's K/V, %d recurrent\n",
              first.full_layers, first.window_layers,
              first.window ? (" (" + std::to_string(first.window) + " tokens)").c_str() : "", first.shared_layers,
              first.recurrent_layers);
  std::printf("  %9s %12s %12s %12s %12s\n", "tokens", "full K/V", "window K/V", "state", "total");
  const double mib = 1.0 / (1 << 20);
  for (int64_t n : lens) {
    const SequenceMemory m = sequence_memory(arch, c, n, *kv);
    std::printf("  %9lld %12.2f %12.2f %12.2f %12.2f\n", (long long)n, double(m.full_bytes) * mib,
                double(m.window_bytes) * mib, double(m.state_bytes) * mib, double(m.total()) * mib);
  }
}

// A Hugging Face checkpoint: the config as we read it, shards, tensors by dtype.
void print_checkpoint(const std::string& dir, bool all_tensors, const MemoryOptions& mo) {
  safetensors::QuantConfig q;
  auto cfg = safetensors::read_config(dir, &q);
  auto ckpt = safetensors::Checkpoint::open(dir);
  if (!cfg.ok() || !ckpt.ok()) {
    std::fprintf(stderr, "error: %s\n", (cfg.ok() ? ckpt.status() : cfg.status()).to_string().c_str());
    set_exit_code(1);
    return;
  }
  const ModelConfig& c = *cfg;
  std::printf("%s: Hugging Face checkpoint, %zu safetensors file(s), arch %s, %d layers, hidden %d, heads %d/%d, ffn %d%s%s\n",
              dir.c_str(), (*ckpt)->files().size(), c.arch.c_str(), c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.n_ff,
              c.is_moe() ? (", " + std::to_string(c.n_experts) + " experts").c_str() : "",
              q.method.empty() ? "" : (", quantization " + q.method).c_str());
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  const auto names = (*ckpt)->names();
  for (const auto& n : names) {
    const auto* t = (*ckpt)->find(n).info;
    auto& e = by_type[safetensors::st_dtype_name(t->dtype)];
    e.first++;
    e.second += t->nbytes;
  }
  std::printf("tensors by type:\n");
  for (const auto& [name, e] : by_type) std::printf("  %-8s %5d tensors %9.1f MB\n", name.c_str(), e.first, double(e.second) / 1e6);
  const size_t show = all_tensors ? names.size() : std::min<size_t>(12, names.size());
  std::printf("tensors%s:\n", all_tensors ? "" : " (first 12; --tensors for all)");
  for (size_t i = 0; i < show; ++i) std::printf("  %-52s %s\n", names[i].c_str(), (*ckpt)->find(names[i]).info->shape_string().c_str());
  if (const Architecture* arch = ArchRegistry::find(c.arch)) print_sequence_memory(*arch, c, mo);
}

void print_model(const std::string& path, bool all_tensors, const MemoryOptions& mo) {
  if (safetensors::is_checkpoint_dir(path)) return print_checkpoint(path, all_tensors, mo);
  auto f = gguf::File::open(path);
  if (!f.ok()) {
    std::fprintf(stderr, "error: %s\n", f.status().to_string().c_str());
    set_exit_code(1);
    return;
  }
  std::printf("%s: GGUF v%u, %zu metadata keys, %zu tensors, %.1f MB\n", path.c_str(), (*f)->version(),
              (*f)->metadata().size(), (*f)->tensors().size(), double((*f)->file_size()) / 1e6);
  for (const auto& [key, value] : (*f)->metadata()) std::printf("  %-44s %s\n", key.c_str(), value_string(value).c_str());
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  for (const auto& t : (*f)->tensors()) {
    auto& e = by_type[dtype_name(t.dtype)];
    e.first++;
    e.second += t.nbytes;
  }
  std::printf("tensors by type:\n");
  for (const auto& [name, e] : by_type) std::printf("  %-6s %4d tensors %9.1f MB\n", name.c_str(), e.first, double(e.second) / 1e6);
  const size_t show = all_tensors ? (*f)->tensors().size() : std::min<size_t>(12, (*f)->tensors().size());
  std::printf("tensors%s:\n", all_tensors ? "" : " (first 12; --tensors for all)");
  for (size_t i = 0; i < show; ++i) {
    const auto& t = (*f)->tensors()[i];
    std::string shape;
    for (int d = 0; d < t.rank; ++d) shape += (d ? ", " : "") + std::to_string(t.shape[size_t(d)]);
    std::printf("  %-36s %-6s [%s]\n", t.name.c_str(), dtype_name(t.dtype), shape.c_str());
  }
  // The memory plan needs a family Tessera runs; any other file is still described above.
  auto arch_name = (*f)->get_string("general.architecture");
  const Architecture* arch = arch_name.ok() ? ArchRegistry::find(*arch_name) : nullptr;
  if (!arch) {
    std::printf("memory per sequence: not computed (%s)\n",
                arch_name.ok() ? ("architecture '" + *arch_name + "' is not one Tessera runs").c_str()
                               : arch_name.status().message().c_str());
    return;
  }
  auto cfg = arch->config_from_gguf(**f);
  if (!cfg.ok()) {
    std::fprintf(stderr, "error: %s: %s\n", path.c_str(), cfg.status().to_string().c_str());
    set_exit_code(1);
    return;
  }
  print_sequence_memory(*arch, *cfg, mo);
  print_placement(**f, cfg->n_layers, mo);
}
}  // namespace

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "List the devices found (and why a compiled-in backend is unusable), or describe a model file");
  auto path = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  auto mo = std::make_shared<MemoryOptions>();
  cmd->add_option(
      "model", *path,
      "a GGUF file or Hugging Face checkpoint directory: print its metadata, tensor table and the memory one "
      "sequence keeps at 4k, 32k and its trained context");
  cmd->add_flag("--tensors", *all, "list every tensor");
  cmd->add_option("--context", mo->contexts, "more context lengths for the memory table (tokens)");
  cmd->add_option("--kv-dtype", mo->kv_dtype,
                  "KV cache dtype for the memory table: f16, bf16, f32, fp8_e4m3 or int8_pc")
      ->capture_default_str();
  cmd->add_option("-d,--device", mo->device,
                  "with --gpu-layers, --cpu-moe or --override-tensor: the main device of the "
                  "placement table (which weights each device would hold)")
      ->capture_default_str();
  add_placement_options(cmd, &mo->placement);
  cmd->callback([path, all, mo] {
    if (path->empty()) print_devices();
    else print_model(*path, *all, *mo);
  });
}

}  // namespace tessera::cli

// Placement: which device holds each weight and each layer's KV cache when a model spans two
// devices (docs/multi-device.md), as llama.cpp's --n-gpu-layers, --cpu-moe and
// --override-tensor place a model across a GPU and the CPU. The step graph is then split where
// the devices change (core/exec/split_graph.h); nodes run where their weights are.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/status.h"

namespace tessera {

// PlacementOptions::main_layers: as many of the last layers as the main device's memory holds.
inline constexpr int kFitLayers = -2;

struct PlacementOptions {
  // The device for what the main device does not hold (the CPU); null: the whole model on the
  // main device, and every other field must be left at its default.
  DevicePtr host;
  // The last N repeating layers (weights and KV) on the main device, the others on |host|; with
  // N = n_layers + 1 the output head too (llama.cpp's -ngl). -1: every layer and the head. The
  // token embedding is on |host| whenever a split is asked for (as in llama.cpp).
  // kFitLayers: the whole model on the main device when its weights and the KV below fit
  // |main_budget|, else the most trailing layers that do (Model decides it from the weights'
  // sizes before loading any; fit_main_layers).
  int main_layers = -1;
  // With kFitLayers: the bytes the main device may take (0: its free memory, Device::memory),
  // of which 5% is kept back for activations and executables, and the KV tokens to keep room for
  // (each main-device layer's K and V at |fit_kv_bytes_per_element| bytes per element).
  size_t main_budget = 0;
  int64_t fit_kv_tokens = 0;
  int fit_kv_bytes_per_element = 2;
  // Routed experts' weights on |host| whatever their layer (llama.cpp's --cpu-moe).
  bool experts_on_host = false;
  // (regex, device id) pairs tried in order on each weight's GGUF name before the rules above
  // (llama.cpp's -ot "exps=CPU"): the device is the main or the host device's id, or "cpu" for
  // a host that is the CPU.
  std::vector<std::pair<std::string, std::string>> overrides;

  bool any() const { return host != nullptr; }
};

// kFitLayers' rule: the number of trailing layers the main device takes, given each layer's
// bytes (its weights and its share of the KV, [n_layers]), the output head's and the rest's
// (the token embedding and small tensors) and the usable budget: n_layers + 1 when everything
// fits (no split), else the largest N whose last N layers fit.
int fit_main_layers(const std::vector<int64_t>& layer_bytes, int64_t head_bytes, int64_t other_bytes, int64_t budget);

// N of a GGUF tensor name "blk.N....", else -1.
int gguf_layer_of(const std::string& name);

class Placement {
 public:
  // One device: everything on |main|.
  explicit Placement(DevicePtr main) : main_(std::move(main)) {}
  // Checks |o| against the model (errors name the option: a host that is the main device, N
  // outside -1..n_layers + 1, a bad pattern, an unknown device id).
  static Result<Placement> resolve(const PlacementOptions& o, DevicePtr main, int n_layers);

  bool split() const { return host_ != nullptr; }
  Device& main() const { return *main_; }
  // The device of the weight named |name| (GGUF naming: blk.N.*, token_embd, output, ...).
  Device& tensor_device(const std::string& name, bool experts) const;
  // The device of layer |layer|'s KV cache (its attention).
  Device& layer_device(int layer) const;
  // "layers 0-9 on cpu, 10-29 on vulkan:0; output on vulkan:0; experts on cpu", for info/--stats.
  std::string describe(int n_layers) const;

 private:
  struct Override;
  DevicePtr main_, host_;
  int n_layers_ = 0, main_layers_ = -1;
  bool experts_on_host_ = false;
  std::vector<std::shared_ptr<const Override>> overrides_;
  Device& device_of_override(const std::string& name, bool* found) const;
};

}  // namespace tessera

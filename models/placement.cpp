#include "models/placement.h"

#include <algorithm>
#include <cctype>
#include <regex>

namespace tessera {

struct Placement::Override {
  std::string pattern;
  std::regex re;
  bool to_host = false;
};

namespace {
std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int gguf_layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  size_t i = 4;
  int n = 0;
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) n = n * 10 + (name[i++] - '0');
  return i < name.size() && name[i] == '.' ? n : -1;
}

int fit_main_layers(const std::vector<int64_t>& layer_bytes, int64_t head_bytes, int64_t other_bytes, int64_t budget) {
  const int n = int(layer_bytes.size());
  int64_t all = head_bytes + other_bytes;
  for (int64_t b : layer_bytes) all += b;
  if (all <= budget) return n + 1;
  int64_t used = 0;
  int fit = 0;
  for (int l = n - 1; l >= 0 && used + layer_bytes[size_t(l)] <= budget; --l) {
    used += layer_bytes[size_t(l)];
    ++fit;
  }
  return fit;
}

Result<Placement> Placement::resolve(const PlacementOptions& o, DevicePtr main, int n_layers) {
  Placement p(std::move(main));
  if (!o.any()) {
    if (o.main_layers != -1 || o.experts_on_host || !o.overrides.empty())
      return InvalidArgument("--gpu-layers, --cpu-moe and --override-tensor need a second device to place weights on");
    return p;
  }
  if (o.host.get() == p.main_.get())
    return InvalidArgument("placement: the host device " + o.host->info().id +
                           " is the main device; --gpu-layers, "
                           "--cpu-moe and --override-tensor split a model between a GPU (--device) and the CPU");
  if (o.main_layers < -1 || o.main_layers > n_layers + 1)
    return InvalidArgument("--gpu-layers " + std::to_string(o.main_layers) + ": the model has " +
                           std::to_string(n_layers) + " layers; give 0.." + std::to_string(n_layers) +
                           " (the last N layers on " + p.main_->info().id + "), " + std::to_string(n_layers + 1) +
                           " (every layer and the output head) or -1 (everything)");
  p.host_ = o.host;
  p.n_layers_ = n_layers;
  p.main_layers_ = o.main_layers < 0 ? n_layers + 1 : o.main_layers;
  p.experts_on_host_ = o.experts_on_host;
  for (const auto& [pattern, device] : o.overrides) {
    auto ov = std::make_shared<Override>();
    ov->pattern = pattern;
    try {
      ov->re = std::regex(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return InvalidArgument("--override-tensor '" + pattern + "=" + device + "': not a regular expression (" +
                             e.what() + ")");
    }
    const std::string d = lower(device);
    if (d == lower(p.host_->info().id) || (d == "cpu" && p.host_->info().type == DeviceType::kCpu)) {
      ov->to_host = true;
    } else if (d != lower(p.main_->info().id)) {
      return InvalidArgument("--override-tensor '" + pattern + "=" + device + "': unknown device '" + device +
                             "'; the model is placed on " + p.main_->info().id + " and " + p.host_->info().id);
    }
    p.overrides_.push_back(std::move(ov));
  }
  return p;
}

Device& Placement::device_of_override(const std::string& name, bool* found) const {
  for (const auto& ov : overrides_)
    if (std::regex_search(name, ov->re)) {
      *found = true;
      return ov->to_host ? *host_ : *main_;
    }
  *found = false;
  return *main_;
}

Device& Placement::layer_device(int layer) const {
  if (!host_) return *main_;
  return layer >= n_layers_ - std::min(main_layers_, n_layers_) ? *main_ : *host_;
}

Device& Placement::tensor_device(const std::string& name, bool experts) const {
  if (!host_) return *main_;
  bool found = false;
  Device& d = device_of_override(name, &found);
  if (found) return d;
  if (experts && experts_on_host_) return *host_;
  const int layer = gguf_layer_of(name);
  if (layer >= 0) return layer_device(layer);
  if (name.rfind("token_embd", 0) == 0) return *host_;
  if (name.rfind("output", 0) == 0) return main_layers_ > n_layers_ ? *main_ : *host_;  // output.weight, output_norm
  return *main_;  // small tensors every layer reads (rope factors): copied to the layers elsewhere
}

std::string Placement::describe(int n_layers) const {
  if (!host_) return "all on " + main_->info().id;
  const int first_main = n_layers - std::min(main_layers_, n_layers);
  auto range = [](int a, int b) {
    return a == b - 1 ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b - 1);
  };
  std::string s;
  if (first_main > 0) s += "layers " + range(0, first_main) + " on " + host_->info().id;
  if (first_main < n_layers)
    s += std::string(s.empty() ? "" : ", ") + "layers " + range(first_main, n_layers) + " on " + main_->info().id;
  s += "; embeddings on " + host_->info().id + ", output on " + (main_layers_ > n_layers ? main_ : host_)->info().id;
  if (experts_on_host_) s += "; experts on " + host_->info().id;
  for (const auto& ov : overrides_) s += "; /" + ov->pattern + "/ on " + (ov->to_host ? host_ : main_)->info().id;
  return s;
}

}  // namespace tessera

#include "models/arch/registry.h"

namespace tessera {

// Each family file defines its <name>_architecture(); adding a family is one line here.
#define TESSERA_ARCHITECTURES(X) \
  X(llama)                       \
  X(gemma3)                      \
  X(phi3)                        \
  X(bert)                        \
  X(qwen35)                      \
  X(gemma4)                      \
  X(gpt_oss)

#define TESSERA_DECLARE_ARCH(name) const Architecture& name##_architecture();
TESSERA_ARCHITECTURES(TESSERA_DECLARE_ARCH)
#undef TESSERA_DECLARE_ARCH

const std::vector<const Architecture*>& ArchRegistry::all() {
#define TESSERA_LIST_ARCH(name) &name##_architecture(),
  static const std::vector<const Architecture*> archs = {TESSERA_ARCHITECTURES(TESSERA_LIST_ARCH)};
#undef TESSERA_LIST_ARCH
  return archs;
}

const Architecture* ArchRegistry::find(const std::string& name) {
  for (const Architecture* a : all())
    for (const std::string& n : a->gguf_names())
      if (n == name) return a;
  return nullptr;
}

Result<const Architecture*> ArchRegistry::get(const std::string& name) {
  if (const Architecture* a = find(name)) return a;
  return Unimplemented("architecture '" + name + "' is not supported (" + gguf_name_list() + ")");
}

std::optional<std::pair<const Architecture*, std::string>> ArchRegistry::find_hf(const std::string& model_type) {
  for (const Architecture* a : all())
    for (const auto& [type, arch] : a->hf_model_types())
      if (type == model_type) return std::make_pair(a, arch);
  return std::nullopt;
}

std::string ArchRegistry::gguf_name_list() {
  std::string s;
  for (const Architecture* a : all())
    for (const std::string& n : a->gguf_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string ArchRegistry::hf_model_type_list() {
  std::string s;
  for (const Architecture* a : all())
    for (const auto& [type, arch] : a->hf_model_types()) s += (s.empty() ? "" : ", ") + type;
  return s;
}

}  // namespace tessera

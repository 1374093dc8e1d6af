// ArchRegistry: every model family Tessera builds, found by GGUF architecture name or by HF
// config.json model_type. The list is in registry.cpp, one line per family.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "models/arch/architecture.h"

namespace tessera {

class ArchRegistry {
 public:
  // Every registered family, in registration order.
  static const std::vector<const Architecture*>& all();
  // The family building GGUF architecture |name|; nullptr when none does.
  static const Architecture* find(const std::string& name);
  // The family |name| names, or Unimplemented naming it and listing every supported name.
  static Result<const Architecture*> get(const std::string& name);
  // The family reading HF model_type |model_type|, with the GGUF name it loads as.
  static std::optional<std::pair<const Architecture*, std::string>> find_hf(const std::string& model_type);
  // "llama, mistral, ..." and "llama, mistral, mixtral, ...": for error messages and `tessera info`.
  static std::string gguf_name_list();
  static std::string hf_model_type_list();
};

}  // namespace tessera

// The tokenizer files of a checkpoint directory -> TokenizerData (parsing in models/tokenizer).
#include <filesystem>

#include "models/mapped_file.h"
#include "models/safetensors/hf_model.h"
#include "models/safetensors/json_util.h"

namespace tessera::safetensors {

Result<TokenizerData> read_tokenizer(const std::string& dir, std::string* chat_template) {
  namespace fs = std::filesystem;
  const std::string tok_path = dir + "/tokenizer.json", cfg_path = dir + "/tokenizer_config.json";
  std::error_code ec;
  if (!fs::exists(tok_path, ec)) return NotFound(tok_path + ": missing (only tokenizer.json vocabularies are supported)");
  std::string tok, cfg;
  TS_ASSIGN_OR_RETURN(tok, read_file(tok_path));
  if (fs::exists(cfg_path, ec)) {
    TS_ASSIGN_OR_RETURN(cfg, read_file(cfg_path));
  }
  auto d = tokenizer_data_from_hf_json(tok, cfg, chat_template);
  if (!d.ok()) return d.status().with_context(dir + "/");
  // Newer transformers save the template beside the config.
  const std::string jinja = dir + "/chat_template.jinja";
  if (chat_template->empty() && fs::exists(jinja, ec)) {
    TS_ASSIGN_OR_RETURN(*chat_template, read_file(jinja));
  }
  return d;
}

}  // namespace tessera::safetensors

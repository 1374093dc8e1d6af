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

Status pad_vocabulary(TokenizerData* d, int64_t n_rows, const std::string& dir) {
  const int64_t n = int64_t(d->tokens.size());
  if (n > n_rows)
    return InvalidArgument(dir + ": the embedding has " + std::to_string(n_rows) + " rows but tokenizer.json has " +
                           std::to_string(n) + " tokens");
  if (n == n_rows) return OkStatus();
  if (d->token_types.empty()) d->token_types.assign(size_t(n), kTokenNormal);
  for (int64_t id = n; id < n_rows; ++id) {
    d->tokens.push_back("[PAD" + std::to_string(id) + "]");
    d->token_types.push_back(kTokenUnused);
    if (!d->scores.empty()) d->scores.push_back(0.0f);
  }
  return OkStatus();
}

}  // namespace tessera::safetensors

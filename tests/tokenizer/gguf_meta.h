// A minimal GGUF metadata reader for tests only: the tokenizer.* keys SmolLM2's file has.
// The real reader lives in models/gguf; this keeps the tokenizer tests independent of it.
#pragma once
#include <string>

#include "core/status.h"
#include "models/tokenizer/tokenizer.h"

namespace tessera::testing {

struct GgufVocab {
  TokenizerData data;
  std::string chat_template;
};

Result<GgufVocab> read_gguf_vocab(const std::string& path);

}  // namespace tessera::testing

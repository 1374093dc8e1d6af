#include "grammar/compiler.h"

#include <algorithm>

#include "models/tokenizer/tokenizer.h"

namespace tessera {

const char* grammar_kind_name(GrammarSpec::Kind k) {
  switch (k) {
    case GrammarSpec::Kind::kJson: return "json";
    case GrammarSpec::Kind::kJsonSchema: return "json_schema";
    case GrammarSpec::Kind::kEbnf: return "ebnf";
    case GrammarSpec::Kind::kRegex: return "regex";
  }
  return "unknown";
}

GrammarVocab grammar_vocab(const Tokenizer& tok, int32_t model_vocab) {
  GrammarVocab v;
  const int32_t n = std::min(tok.vocab_size(), model_vocab);
  v.pieces.resize(size_t(n));
  for (int32_t id = 0; id < n; ++id) {
    // NOTE: a control token's text ("<|im_end|>") must never count as the characters it spells
    // inside a JSON string: "" marks it special, so the grammar allows it only as a stop token.
    if (tok.is_eog(id)) v.stop_ids.push_back(id);
    if (!tok.is_control(id) && !tok.is_eog(id)) v.pieces[size_t(id)] = tok.token_to_piece(id);
  }
  v.vocab_size = model_vocab;
  v.add_prefix_space = tok.strips_leading_space();
  return v;
}

}  // namespace tessera

// Structured output: grammar specifications (JSON, JSON Schema, EBNF, regex) compiled into
// Grammar objects (core/sched/grammar.h) for a model's vocabulary. Implemented with XGrammar
// (xgrammar_compiler.cpp) when the build has it (TESSERA_XGRAMMAR); otherwise create() is
// Unavailable and says why (no_xgrammar.cpp). No XGrammar header is included from here.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/sched/grammar.h"
#include "core/status.h"

namespace tessera {

class Tokenizer;

struct GrammarSpec {
  enum class Kind {
    kJson,        // any JSON object (OpenAI's response_format json_object)
    kJsonSchema,  // |source| is a JSON Schema
    kEbnf,        // |source| is a GBNF/EBNF grammar whose start rule is "root"
    kRegex,       // |source| is a regular expression the whole output must match
  };
  Kind kind = Kind::kJson;
  std::string source;
  // JSON Schema: objects admit no properties beyond those listed, and arrays no items beyond
  // "items", unless the schema says otherwise (OpenAI's strict; XGrammar's strict_mode).
  bool strict = true;
};
const char* grammar_kind_name(GrammarSpec::Kind k);  // "json", "json_schema", "ebnf", "regex"

// What a grammar engine needs to know of the vocabulary, from Tessera's own tokenizer.
struct GrammarVocab {
  std::vector<std::string> pieces;  // [tokenizer vocab]: each token's decoded bytes; "" = special
  std::vector<int32_t> stop_ids;    // end-of-generation ids: allowed exactly where the grammar ends
  int32_t vocab_size = 0;           // the model's logits width (>= pieces.size(); the rest special)
  bool add_prefix_space = false;    // decoding drops a leading space (SentencePiece)
};
// Decoded bytes of every token (control tokens ""), the tokenizer's end-of-generation ids.
GrammarVocab grammar_vocab(const Tokenizer& tok, int32_t model_vocab);

class GrammarCompiler {
 public:
  virtual ~GrammarCompiler() = default;
  // A compiler for |vocab| (building it indexes the vocabulary: tens of ms for 50k tokens).
  // Unavailable, naming why, in a build without XGrammar.
  static Result<std::unique_ptr<GrammarCompiler>> create(GrammarVocab vocab);
  // Whether this build has a grammar engine, and if not why (for a 400 or a CLI error).
  static bool available();
  static std::string why_unavailable();

  // A grammar in its start state. Thread-safe; repeated specs come from a cache. An invalid
  // schema, grammar or regex is InvalidArgument naming the kind and XGrammar's message.
  virtual Result<std::shared_ptr<const Grammar>> compile(const GrammarSpec& spec) = 0;
  virtual int32_t vocab_size() const = 0;
};

}  // namespace tessera

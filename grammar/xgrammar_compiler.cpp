// GrammarCompiler and Grammar over XGrammar's C++ library (built from its PyPI sdist at configure
// time: cmake/TesseraXGrammar.cmake). XGrammar reports errors by exceptions; none leaves this file.
#include <dlpack/dlpack.h>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <bit>
#include <mutex>
#include <optional>

#include "grammar/compiler.h"

namespace tessera {
namespace {

// XGrammar's messages begin "[hh:mm:ss] path/to/file.cc:123: "; a client needs only the rest.
std::string without_origin(const std::string& what) {
  size_t at = 0;
  if (what.size() > 11 && what[0] == '[' && what[9] == ']' && what[10] == ' ') {
    const size_t colon = what.find(": ", 11);
    const size_t space = what.find(' ', 11);
    if (colon != std::string::npos && colon <= space) at = colon + 2;
  }
  return what.substr(at);
}

class XGrammarGrammar final : public Grammar {
 public:
  XGrammarGrammar(xgrammar::GrammarMatcher m, int32_t vocab) : m_(std::move(m)), vocab_(vocab) {}

  int32_t fill_mask(uint32_t* mask) override {
    const int32_t words = mask_words(vocab_);
    if (m_.IsTerminated()) {  // after a stop token nothing may follow
      std::fill(mask, mask + words, 0u);
      return 0;
    }
    int64_t shape = words;
    DLTensor t{};
    t.data = mask;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();  // int32 words, the layout of core/sched/grammar.h
    t.shape = &shape;
    m_.FillNextTokenBitmask(&t);
    // Bits past the vocabulary in the last word are not tokens.
    if (vocab_ % 32) mask[words - 1] &= (1u << (vocab_ % 32)) - 1u;
    int32_t n = 0;
    for (int32_t i = 0; i < words; ++i) n += std::popcount(mask[i]);
    return n;
  }
  bool accept(int32_t token) override {
    if (token < 0 || token >= vocab_ || m_.IsTerminated()) return false;
    return m_.AcceptToken(token);
  }
  void rollback(int32_t n) override {
    if (n > 0) m_.Rollback(n);
  }
  std::unique_ptr<Grammar> fork() const override { return std::make_unique<XGrammarGrammar>(m_.Fork(), vocab_); }
  bool terminated() const override { return m_.IsTerminated(); }
  int32_t vocab_size() const override { return vocab_; }

 private:
  xgrammar::GrammarMatcher m_;
  int32_t vocab_;
};

class XGrammarCompiler final : public GrammarCompiler {
 public:
  // JSON is written compactly (no whitespace at all): fewer tokens, and no room for a small model
  // to pad with spaces until max_tokens.
  static inline const std::pair<std::string, std::string> kCompact{",", ":"};

  XGrammarCompiler(xgrammar::TokenizerInfo info, std::vector<int32_t> stop_ids, int32_t vocab)
      : compiler_(info, /*max_threads=*/2, /*cache_enabled=*/true), stop_ids_(std::move(stop_ids)), vocab_(vocab) {}

  Result<std::shared_ptr<const Grammar>> compile(const GrammarSpec& spec) override {
    const char* kind = grammar_kind_name(spec.kind);
    try {
      std::optional<xgrammar::CompiledGrammar> cg;
      {
        // NOTE: one compile at a time: the compiler's cache is shared, and a compile already
        // uses its own threads.
        std::lock_guard<std::mutex> lock(mu_);
        switch (spec.kind) {
          case GrammarSpec::Kind::kJson:
            // Any object, written compactly: with free whitespace a small model may pad forever.
            cg = compiler_.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false, std::nullopt, kCompact);
            break;
          case GrammarSpec::Kind::kJsonSchema:
            cg = compiler_.CompileJSONSchema(spec.source, /*any_whitespace=*/false, std::nullopt, kCompact, spec.strict);
            break;
          case GrammarSpec::Kind::kEbnf: cg = compiler_.CompileGrammar(spec.source, "root"); break;
          case GrammarSpec::Kind::kRegex: cg = compiler_.CompileRegex(spec.source); break;
        }
      }
      if (!cg) return InvalidArgument(std::string(kind) + ": unknown grammar kind");
      xgrammar::GrammarMatcher m(*cg, stop_ids_, /*terminate_without_stop_token=*/false);
      return std::shared_ptr<const Grammar>(std::make_shared<XGrammarGrammar>(std::move(m), vocab_));
    } catch (const std::exception& e) {
      return InvalidArgument(std::string("invalid ") + kind + ": " + without_origin(e.what()));
    }
  }
  int32_t vocab_size() const override { return vocab_; }

 private:
  std::mutex mu_;
  xgrammar::GrammarCompiler compiler_;
  std::vector<int32_t> stop_ids_;
  int32_t vocab_;
};

}  // namespace

bool GrammarCompiler::available() { return true; }
std::string GrammarCompiler::why_unavailable() { return ""; }

Result<std::unique_ptr<GrammarCompiler>> GrammarCompiler::create(GrammarVocab vocab) {
  if (vocab.vocab_size < int32_t(vocab.pieces.size()) || vocab.vocab_size <= 0)
    return InvalidArgument("grammar vocabulary: vocab_size " + std::to_string(vocab.vocab_size) + " below its " +
                           std::to_string(vocab.pieces.size()) + " tokens");
  for (int32_t id : vocab.stop_ids)
    if (id < 0 || id >= vocab.vocab_size)
      return InvalidArgument("grammar vocabulary: stop token id " + std::to_string(id) + " outside [0, " +
                             std::to_string(vocab.vocab_size) + ")");
  try {
    // The pieces are already decoded bytes: RAW (no byte-level or byte-fallback decoding).
    xgrammar::TokenizerInfo info(vocab.pieces, xgrammar::VocabType::RAW, vocab.vocab_size, vocab.stop_ids,
                                 vocab.add_prefix_space);
    return std::unique_ptr<GrammarCompiler>(std::make_unique<XGrammarCompiler>(std::move(info), vocab.stop_ids, vocab.vocab_size));
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("grammar vocabulary: ") + e.what());
  }
}

}  // namespace tessera

// A build without XGrammar (TESSERA_XGRAMMAR=OFF, or its sdist could not be fetched or built):
// every request for structured output is refused, saying why.
#include "grammar/compiler.h"

namespace tessera {

bool GrammarCompiler::available() { return false; }

std::string GrammarCompiler::why_unavailable() {
  return "structured output is unavailable: this build of Tessera has no XGrammar (" TESSERA_XGRAMMAR_WHY ")";
}

Result<std::unique_ptr<GrammarCompiler>> GrammarCompiler::create(GrammarVocab) { return Unavailable(why_unavailable()); }

}  // namespace tessera

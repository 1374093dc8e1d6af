// libFuzzer target for the tokenizers on real vocabularies: SmolLM2's byte-level BPE (from its
// GGUF in $TESSERA_MODELS) and a SentencePiece BPE model trained by the `sentencepiece` package
// (tests/data/spm_golden.txt). Input: one flag byte (bit 0: which tokenizer, bit 1: add_special,
// bit 2: parse_special), then the text, any bytes.
// Checked: ids in range; decode(encode(text)) == text where the tokenizer promises it (byte-level
// BPE without added specials, less the bytes SmolLM2's vocabulary cannot spell, which are
// dropped; SentencePiece with byte fallback when no special token is parsed and the text has no
// literal U+2581, which encoding uses for spaces); streaming decode equals decode for valid UTF-8.
#include <array>
#include <cstdint>

#include "models/tokenizer/tokenizer.h"
#include "models/tokenizer/unicode.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/tokenizer/gguf_meta.h"
#include "tests/tokenizer/golden.h"

namespace tessera {
namespace {

std::unique_ptr<Tokenizer> smollm2() {
  const std::string path = fuzz::model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
  auto v = testing::read_gguf_vocab(path);
  fuzz::require(v.status(), "SmolLM2 vocabulary");
  auto t = Tokenizer::create(std::move(v->data));
  fuzz::require(t.status(), "SmolLM2 tokenizer");
  return std::move(t).value();
}

std::unique_ptr<Tokenizer> spm() {
  TokenizerData d;
  d.model = "llama";
  d.unk = 0;
  d.bos = 1;
  d.eos = 2;
  d.add_bos = true;
  d.add_space_prefix = true;
  for (const auto& r : testing::read_golden(fuzz::test_data_path("spm_golden.txt"))) {
    if (r.tag != "V") continue;
    d.tokens.push_back(r.text);
    d.token_types.push_back(std::stoi(r.arg));
    d.scores.push_back(std::stof(r.fields.at(0)));
  }
  if (d.tokens.size() < 400) fuzz::fail("spm_golden.txt: " + std::to_string(d.tokens.size()) + " tokens");
  auto t = Tokenizer::create(std::move(d));
  fuzz::require(t.status(), "SentencePiece tokenizer");
  return std::move(t).value();
}

// The bytes |t| (byte-level BPE) has a token for.
std::array<bool, 256> spellable(const Tokenizer& t) {
  std::array<bool, 256> ok{};
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8_append(s, byte_to_codepoint(uint8_t(b)));
    ok[size_t(b)] = t.find_token(s).has_value();
  }
  return ok;
}

bool valid_utf8(std::string_view s) {
  for (size_t p = 0; p < s.size();) {
    const size_t n = utf8_valid_len(s, p);
    if (!n) return false;
    p += n;
  }
  return true;
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  static const std::unique_ptr<Tokenizer> kBpe = smollm2(), kSpm = spm();
  static const std::array<bool, 256> kBpeSpells = spellable(*kBpe);
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const bool is_spm = flags & 1, add_special = flags & 2, parse_special = flags & 4;
  const Tokenizer& t = is_spm ? *kSpm : *kBpe;
  const std::vector<int32_t> ids = t.encode(text, add_special, parse_special);
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) fuzz::fail("id " + std::to_string(id) + " out of range");
  const std::string back = t.decode(ids);
  const bool promised = is_spm ? !parse_special && !add_special && text.find("\xE2\x96\x81") == std::string_view::npos
                               : !add_special || !t.add_bos();
  std::string want;
  for (char c : text)
    if (is_spm || kBpeSpells[uint8_t(c)]) want += c;
  if (promised && back != want)
    fuzz::fail(std::string(is_spm ? "SentencePiece" : "byte-level BPE") + " round trip: " + std::to_string(text.size()) +
               " bytes in, " + std::to_string(back.size()) + " back");
  if (valid_utf8(back)) {
    StreamDecoder sd(t);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    if (streamed != back) fuzz::fail("streamed decode differs from decode");
  }
  (void)t.decode(ids, /*skip_special=*/true);
  return 0;
}

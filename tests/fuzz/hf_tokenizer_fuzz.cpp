// libFuzzer target for tokenizer.json + tokenizer_config.json loading
// (tokenizer_data_from_hf_json, models/tokenizer/hf_json.cpp) and Tokenizer::create on what it
// returns. The input is tokenizer.json, or tokenizer.json, a NUL byte, then tokenizer_config.json.
// A tokenizer that is created must encode to ids in range and decode them; a byte-level BPE one
// whose vocabulary spells every byte must give back exactly the text it was given.
#include <cstdint>
#include <cstring>

#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view tok_json = in.substr(0, nul);
  const std::string_view cfg_json = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  std::string chat_template;
  auto d = tokenizer_data_from_hf_json(tok_json, cfg_json, &chat_template);
  fuzz::note("tokenizer.json", d.status());
  if (!d.ok()) return 0;
  const bool byte_level = d->model == "gpt2";
  const std::vector<int32_t> types = d->token_types;
  auto tok = Tokenizer::create(std::move(d).value());
  fuzz::note("create", tok.status());
  if (!tok.ok()) return 0;
  const Tokenizer& t = **tok;
  bool every_byte = byte_level;
  if (every_byte) {
    bool seen[256] = {};
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
      const int32_t type = size_t(id) < types.size() ? types[size_t(id)] : kTokenNormal;
      const std::string p = t.token_to_piece(id);
      if (p.size() == 1 && (type == kTokenNormal || type == kTokenByte)) seen[uint8_t(p[0])] = true;
    }
    for (bool b : seen) every_byte = every_byte && b;
  }
  static const std::string kText = "Hello world, 123 <|im_start|> caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD\n\t x";
  for (bool special : {false, true}) {
    const auto ids = t.encode(kText, special, special);
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) fuzz::fail("encode returned id " + std::to_string(id) + " out of range");
    const std::string back = t.decode(ids);
    if (every_byte && !special && back != kText) fuzz::fail("byte-level BPE round trip failed: '" + back + "'");
    StreamDecoder sd(t);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    (void)t.decode(ids, /*skip_special=*/true);
  }
  return 0;
}

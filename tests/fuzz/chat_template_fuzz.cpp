// libFuzzer target for the chat-template engine (models/chat_template: lexer, parser,
// evaluator, builtins). Input: the template source, then optionally a NUL byte, one flag byte
// (bit 0: add_generation_prompt) and the messages as role NUL content NUL role NUL content ...
// Without the NUL the source is rendered against a fixed four-turn conversation. Any input must
// parse or fail with InvalidArgument, and render to text or a Status; the evaluator's step and
// output limits bound the time and memory of each input.
#include <cstdint>

#include "models/chat_template/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::vector<std::string_view> split_nul(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t p = 0;;) {
    const size_t q = s.find('\0', p);
    out.push_back(s.substr(p, q == std::string_view::npos ? std::string_view::npos : q - p));
    if (q == std::string_view::npos) return out;
    p = q + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  auto tmpl = ChatTemplate::parse(in.substr(0, nul));
  if (!tmpl.ok()) {
    if (tmpl.status().code() != StatusCode::kInvalidArgument)
      fuzz::fail("parse error is not InvalidArgument: " + tmpl.status().to_string());
    return 0;
  }
  std::vector<ChatMessage> messages = {
      {"system", "You are terse."}, {"user", "Hi <|im_end|>"}, {"assistant", "Hello!"}, {"user", "2+2?"}};
  bool add_generation_prompt = true;
  if (nul != std::string_view::npos && nul + 1 < in.size()) {
    add_generation_prompt = in[nul + 1] & 1;
    messages.clear();
    const auto parts = split_nul(in.substr(nul + 2));
    for (size_t i = 0; i + 1 < parts.size(); i += 2) messages.push_back({std::string(parts[i]), std::string(parts[i + 1])});
  }
  auto out = tmpl->render(messages, add_generation_prompt, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  fuzz::note("render", out.status());
  volatile size_t sink = out.ok() ? out->size() : out.status().message().size();
  (void)sink;
  return 0;
}

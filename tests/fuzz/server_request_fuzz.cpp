// libFuzzer target for the OpenAI server's request parsing and validation
// (server::parse_request, server/request.cpp): every input is a JSON body, parsed as both a
// /v1/completions and a /v1/chat/completions request against a real (tiny) model: SmolLM2's
// metadata, cut vocabulary and chat template at dim 8 (corpus/model_load/smollm2-cut.gguf), so
// prompts are tokenised and chat messages rendered for real. An accepted request must be one
// the engine takes: a prompt of in-vocabulary ids that fits the context, positive max_tokens.
// The same bytes are also read as a model's reply: split into reasoning and content (every way
// of cutting it must agree) and parsed for tool calls (server/reasoning.h, server/structured.h).
#include <cstdint>

#include "core/reference/reference.h"
#include "core/sched/engine.h"
#include "core/sched/engine_thread.h"
#include "models/model.h"
#include "server/context.h"
#include "server/reasoning.h"
#include "server/request.h"
#include "server/structured.h"
#include "tests/fuzz/fuzz_util.h"

namespace tessera {
namespace {

struct Server {
  std::unique_ptr<Model> model;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<EngineThread> thread;
  std::unique_ptr<server::ServerContext> ctx;
};

Server& the_server() {
  static Server* s = [] {
    auto* out = new Server();
    auto m = Model::load(TESSERA_SOURCE_DIR "/tests/fuzz/corpus/model_load/smollm2-cut.gguf",
                         std::make_shared<ref::ReferenceDevice>());
    fuzz::require(m.status(), "the tiny SmolLM2 model");
    out->model = std::move(m).value();
    auto kv = out->model->create_kv_cache(256);
    fuzz::require(kv.status(), "its KV cache");
    out->kv = std::move(kv).value();
    out->engine = std::make_unique<Engine>(*out->model, *out->kv, out->model->codec());
    out->thread = std::make_unique<EngineThread>(*out->engine);
    server::ServeOptions opts;
    opts.model_name = "smollm2";
    out->ctx.reset(new server::ServerContext{out->model.get(), out->thread.get(), opts});
    return out;
  }();
  return *s;
}

void check(const server::ParsedRequest& r, const Model& m) {
  const GenerationRequest& g = r.gen;
  if (g.prompt.empty()) fuzz::fail("accepted an empty prompt");
  if (int64_t(g.prompt.size()) >= m.context_length()) fuzz::fail("accepted a prompt longer than the context");
  for (int32_t t : g.prompt)
    if (t < 0 || t >= m.vocab_size()) fuzz::fail("accepted token id " + std::to_string(t));
  if (g.max_tokens <= 0) fuzz::fail("accepted max_tokens " + std::to_string(g.max_tokens));
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  Server& s = the_server();
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (bool chat : {false, true}) {
    server::ParsedRequest r;
    r.chat = chat;
    const auto err = server::parse_request(*s.ctx, body, &r);
    fuzz::note(chat ? "chat" : "completion", err ? InvalidArgument(std::to_string(err->status) + " " + err->message) : OkStatus());
    if (err && (err->status < 400 || err->status > 499 || err->message.empty()))
      fuzz::fail("error " + std::to_string(err->status) + " '" + err->message + "'");
    if (!err) check(r, *s.model);
  }
  // The bytes as a reply: the split of the whole equals the split fed in two pieces.
  for (bool inside : {false, true}) {
    std::string r1, c1, r2, c2;
    server::ReasoningSplitter whole(server::ThinkTags{}, inside), cut(server::ThinkTags{}, inside);
    whole.feed(body, &r1, &c1);
    whole.finish(&r1, &c1);
    const size_t at = size ? data[0] % (size + 1) : 0;
    cut.feed(std::string_view(body).substr(0, at), &r2, &c2);
    cut.feed(std::string_view(body).substr(at), &r2, &c2);
    cut.finish(&r2, &c2);
    if (r1 != r2 || c1 != c2) fuzz::fail("the reasoning split depends on where the text was cut");
    if (r1.size() + c1.size() > body.size()) fuzz::fail("the reasoning split made text");
  }
  server::ParsedRequest tools;
  tools.tools.push_back({"f", "", nlohmann::json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}})")});
  std::string before;
  const nlohmann::json calls = server::parse_tool_calls(tools, body, "c-", &before);
  if (!calls.is_null() && (!calls.is_array() || calls.empty())) fuzz::fail("tool calls that are not a non-empty array");
  return 0;
}

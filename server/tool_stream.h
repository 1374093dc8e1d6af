// Streaming the reply of a request with tools as OpenAI's tool_calls deltas while it is being
// generated, as vLLM's tool parsers stream: the text before the first call streams as content;
// each call opens with a delta that names it (index, id, type, function.name) once its name is
// complete and offered; its arguments follow in fragments whose concatenation is the call's JSON
// arguments. The forms are those parse_tool_calls reads (structured.h): Hermes <tool_call> JSON
// blocks and Qwen3.5's XML functions inside them (arguments sent a parameter at a time, as JSON),
// a reply that is one JSON call (the grammar-forced form: held until its name is known), and
// harmony messages addressed to=functions.NAME. A suffix that may begin a marker is held back
// until the text shows what it is. No I/O; one per choice, on the thread that owns the choice.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/request.h"

namespace tessera::server {

class ToolCallStream {
 public:
  // |id_prefix| names the calls (id_prefix + index), as parse_tool_calls does.
  ToolCallStream(const ParsedRequest& req, std::string id_prefix);

  struct Delta {
    std::string content;                                  // content the reply adds now
    nlohmann::json tool_calls = nlohmann::json::array();  // tool_call deltas, each with its index
  };
  // |text|: the reply's content so far (each call's text extends the previous call's).
  // |final|: the reply has ended, so nothing is held back.
  Delta update(const std::string& text, bool final);
  // Whether any call has been opened (the choice then finishes with "tool_calls").
  bool opened_calls() const { return !args_sent_.empty(); }

 private:
  const ParsedRequest& req_;
  std::string id_prefix_;
  size_t content_sent_ = 0;
  std::vector<size_t> args_sent_;  // per call opened: bytes of its arguments sent
};

}  // namespace tessera::server

// Chat templates: the Jinja subset real Hugging Face chat templates use, rendered the way
// transformers' apply_chat_template configures Jinja (trim_blocks and lstrip_blocks on,
// loop controls, raise_exception, a JSON tojson, namespace(), strftime_now).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera {

namespace jinja {
struct Template;
}

struct ChatMessage {
  std::string role;
  std::string content;
};

// Immutable after parse(); render() is safe to call from several threads.
class ChatTemplate {
 public:
  // Parses |jinja_source|. Syntax errors are InvalidArgument naming line:col, e.g.
  // "chat template: 3:14: expected 'endfor', found end of template".
  static Result<ChatTemplate> parse(std::string_view jinja_source);

  // Variables: messages (list of {role, content}), add_generation_prompt, bos_token, eos_token
  // (empty unless given in |extra|), plus |extra| strings, and `tools` when |tools_json| is a
  // JSON array (OpenAI's tools, as transformers passes them; absent: undefined), and each member
  // of |kwargs_json| when it is a JSON object (vLLM's chat_template_kwargs, e.g.
  // {"enable_thinking": false}; they may not rename messages, tools or add_generation_prompt).
  // raise_exception(msg) in the template returns InvalidArgument(msg); other evaluation errors
  // name line:col. strftime_now formats the local time, or SOURCE_DATE_EPOCH (UTC) when that
  // environment variable holds a number of seconds (reproducible renders, as in tests).
  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                             const std::map<std::string, std::string>& extra = {},
                             std::string_view tools_json = {}, std::string_view kwargs_json = {}) const;
  // Whether the template reads a `tools` variable (so it has a tool section of its own).
  bool uses_tools() const;

 private:
  ChatTemplate(std::shared_ptr<const jinja::Template> t, bool uses_tools) : tmpl_(std::move(t)), uses_tools_(uses_tools) {}
  std::shared_ptr<const jinja::Template> tmpl_;
  bool uses_tools_ = false;
};

}  // namespace tessera

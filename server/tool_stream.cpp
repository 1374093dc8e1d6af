#include "server/tool_stream.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "server/structured.h"

namespace tessera::server {

using json = nlohmann::json;

namespace {

constexpr size_t npos = std::string_view::npos;

// A call as far as the text shows it.
struct PartialCall {
  std::string name;
  bool named = false;  // the name is complete
  std::string args;    // the arguments so far (JSON text; only ever extended)
};

// What the text so far holds: the content that can be sent, and the calls.
struct Scan {
  std::string content;
  std::vector<PartialCall> calls;
};

std::string_view trim_left(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  return b == npos ? std::string_view() : s.substr(b);
}

std::string trimmed(std::string_view s) {
  s = trim_left(s);
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(e == npos ? std::string_view() : s.substr(0, e + 1));
}

size_t skip_ws(std::string_view t, size_t i) {
  while (i < t.size() && std::strchr(" \t\r\n", t[i])) ++i;
  return i;
}

// The length of the longest suffix of |text| that is a proper prefix of one of |markers|: what
// must be held back, since the next tokens may complete the marker.
size_t held_suffix(std::string_view text, std::initializer_list<std::string_view> markers) {
  size_t held = 0;
  for (std::string_view m : markers)
    for (size_t n = std::min(text.size(), m.size() - 1); n > held; --n)
      if (text.substr(text.size() - n) == m.substr(0, n)) {
        held = n;
        break;
      }
  return held;
}

// One past the end of the JSON value starting at t[at], or npos while the text ends inside it
// (a scalar at the text's end is complete only when |final|).
size_t json_value_end(std::string_view t, size_t at, bool final) {
  if (at >= t.size()) return npos;
  const char c = t[at];
  if (c == '"') {
    for (size_t i = at + 1; i < t.size(); ++i) {
      if (t[i] == '\\') ++i;
      else if (t[i] == '"') return i + 1;
    }
    return npos;
  }
  if (c == '{' || c == '[') {
    int depth = 0;
    bool in_string = false;
    for (size_t i = at; i < t.size(); ++i) {
      const char d = t[i];
      if (in_string) {
        if (d == '\\') ++i;
        else if (d == '"') in_string = false;
      } else if (d == '"') {
        in_string = true;
      } else if (d == '{' || d == '[') {
        ++depth;
      } else if ((d == '}' || d == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return npos;
  }
  size_t i = at;
  while (i < t.size() && !std::strchr(",}] \t\r\n", t[i])) ++i;
  return i < t.size() || final ? i : npos;
}

// A JSON call {"name": ..., "arguments": {...}} starting at b[0] == '{'. The arguments stream
// as the model writes them (an object or array, up to its end); arguments given as a JSON string
// are sent whole once the string is complete. |complete|: the object is closed.
PartialCall json_partial(std::string_view b, bool final, bool* complete = nullptr) {
  PartialCall pc;
  if (complete) *complete = false;
  size_t i = skip_ws(b, 1);
  while (i < b.size() && b[i] == '"') {
    const size_t key_end = json_value_end(b, i, final);
    if (key_end == npos) break;
    const json key = json::parse(b.substr(i, key_end - i), nullptr, false);
    if (!key.is_string()) break;
    i = skip_ws(b, key_end);
    if (i >= b.size() || b[i] != ':') break;
    i = skip_ws(b, i + 1);
    if (i >= b.size()) break;
    const size_t end = json_value_end(b, i, final);
    if (key == "name") {
      if (end == npos) break;
      const json v = json::parse(b.substr(i, end - i), nullptr, false);
      if (v.is_string()) pc.name = v.get<std::string>(), pc.named = true;
    } else if (key == "arguments") {
      if (b[i] == '{' || b[i] == '[') {
        pc.args = std::string(b.substr(i, end == npos ? npos : end - i));
      } else if (end != npos) {
        const json v = json::parse(b.substr(i, end - i), nullptr, false);
        pc.args = v.is_string() ? v.get<std::string>() : std::string(b.substr(i, end - i));
      }
    }
    if (end == npos) break;
    i = skip_ws(b, end);
    if (i < b.size() && b[i] == '}') {
      if (complete) *complete = true;
      break;
    }
    if (i >= b.size() || b[i] != ',') break;
    i = skip_ws(b, i + 1);
  }
  return pc;
}

// Qwen3.5's <function=NAME><parameter=P>value</parameter>...</function>, from b[0] == '<': the
// arguments grow by one "key": value at each closed parameter, and close with the function.
PartialCall xml_partial(const ParsedRequest& req, std::string_view b) {
  PartialCall pc;
  constexpr std::string_view kOpen = "<function=", kParam = "<parameter=";
  const size_t name_end = b.find('>');
  if (name_end == npos) return pc;
  pc.name = trimmed(b.substr(kOpen.size(), name_end - kOpen.size()));
  pc.named = true;
  const ToolSpec* tool = offered_tool(req, pc.name);
  const size_t fn_end = b.find("</function>", name_end);
  const std::string_view inner = b.substr(name_end + 1, fn_end == npos ? npos : fn_end - name_end - 1);
  bool first = true;
  size_t at = 0;
  for (;;) {
    const size_t p = inner.find(kParam, at);
    if (p == npos) break;
    const size_t pn = inner.find('>', p);
    if (pn == npos) break;
    size_t pe = inner.find("</parameter>", pn);
    const size_t next = inner.find(kParam, pn);
    if (pe == npos || (next != npos && next < pe)) pe = next;  // an unclosed parameter
    if (pe == npos && fn_end == npos) break;                   // still being written
    const std::string key = trimmed(inner.substr(p + kParam.size(), pn - p - kParam.size()));
    std::string value(inner.substr(pn + 1, pe == npos ? npos : pe - pn - 1));
    const json v = tool ? xml_parameter_value(*tool, key, std::move(value)) : json(value);
    pc.args += (first ? "{" : ", ") + json(key).dump() + ": " + v.dump(-1, ' ', false, json::error_handler_t::replace);
    first = false;
    if (pe == npos) break;
    at = pe;
  }
  if (fn_end != npos) pc.args += first ? "{}" : "}";
  return pc;
}

// Hermes-style replies: content, then <tool_call> blocks; or the whole reply one JSON call.
Scan scan_hermes(const ParsedRequest& req, std::string_view text, bool final) {
  static constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
  Scan s;
  const size_t first = text.find(kOpen);
  if (first == npos) {
    const std::string_view body = trim_left(text);
    if (body.empty() && !final) return s;        // leading whitespace: it may precede a JSON call
    if (!body.empty() && body.front() == '{') {  // one JSON call, or content that looks like one
      bool complete = false;
      PartialCall pc = json_partial(body, final, &complete);
      if (pc.named && offered_tool(req, pc.name)) {
        s.calls.push_back(std::move(pc));
      } else if (final || complete || (pc.named && !offered_tool(req, pc.name))) {
        s.content = std::string(text);  // not a call: the reply is content
      }
      return s;
    }
    // "<|" too: harmony's markers are not content (scan() switches to them once one is whole).
    s.content =
        std::string(text.substr(0, text.size() - (final ? 0 : held_suffix(text, {kOpen, "<|channel|>", "<|start|>"}))));
    return s;
  }
  s.content = std::string(text.substr(0, first));
  size_t at = first;
  while (at != npos) {
    const size_t body = at + kOpen.size(), close = text.find(kClose, body);
    const std::string_view block = trim_left(text.substr(body, close == npos ? npos : close - body));
    if (block.empty()) break;
    if (block.front() == '<') {
      if (block.size() < 10) break;  // "<function=" still being written
      if (block.rfind("<function=", 0) != 0) break;
      s.calls.push_back(xml_partial(req, block));
    } else if (block.front() == '{') {
      s.calls.push_back(json_partial(block, final || close != npos));
    } else {
      break;
    }
    if (close == npos) break;
    at = text.find(kOpen, close + kClose.size());
  }
  return s;
}

// gpt-oss's harmony messages, separated by <|start|>assistant: those addressed to=functions.NAME
// are calls (arguments: the message's body), the others' bodies are content.
Scan scan_harmony(std::string_view text, bool final) {
  static constexpr std::string_view kStart = "<|start|>assistant", kMessage = "<|message|>", kTo = "to=functions.";
  Scan s;
  size_t at = 0;
  while (at < text.size()) {
    const size_t next = text.find(kStart, at);
    if (next == at) {
      at += kStart.size();
      continue;
    }
    const bool last = next == npos;
    std::string_view msg = text.substr(at, last ? npos : next - at);
    at = last ? text.size() : next;
    if (last && !final)
      msg = msg.substr(0, msg.size() - held_suffix(msg, {kStart, "<|end|>", "<|call|>", "<|return|>"}));
    const size_t m = msg.find(kMessage);
    if (m == npos) {
      if (trim_left(msg).rfind("<|", 0) == 0) {  // a header still being written
        if (last && !final) break;
        continue;
      }
      if (!s.content.empty() && !msg.empty()) s.content += "\n";
      s.content += msg;
      continue;
    }
    const std::string_view header = msg.substr(0, m);
    std::string_view body = msg.substr(m + kMessage.size());
    for (std::string_view end :
         {std::string_view("<|call|>"), std::string_view("<|end|>"), std::string_view("<|return|>")})
      if (const size_t e = body.find(end); e != npos) body = body.substr(0, e);
    const size_t to = header.find(kTo);
    if (to == npos) {
      if (!s.content.empty() && !body.empty()) s.content += "\n";
      s.content += body;
      continue;
    }
    const size_t name_at = to + kTo.size();
    const size_t name_end = header.find_first_of(" \t\r\n<", name_at);
    PartialCall pc;
    pc.name = std::string(header.substr(name_at, name_end == npos ? npos : name_end - name_at));
    pc.named = true;
    pc.args = std::string(trim_left(body));
    s.calls.push_back(std::move(pc));
  }
  return s;
}

bool is_harmony(std::string_view text) {
  return text.find("<|message|>") != npos || text.find("<|channel|>") != npos || text.find("<|start|>") != npos;
}

}  // namespace

ToolCallStream::ToolCallStream(const ParsedRequest& req, std::string id_prefix)
    : req_(req), id_prefix_(std::move(id_prefix)) {}

ToolCallStream::Delta ToolCallStream::update(const std::string& text, bool final) {
  const bool harmony = is_harmony(text);
  Scan s = harmony ? scan_harmony(text, final) : scan_hermes(req_, text, final);
  Delta d;
  // The calls that may open: those in order up to the first whose name is incomplete or not
  // offered (the reply is not a valid call from there on, as parse_tool_calls would say).
  const auto offered = [&](const PartialCall& pc) { return pc.named && offered_tool(req_, pc.name) != nullptr; };
  size_t callable = 0;
  while (callable < s.calls.size() && offered(s.calls[callable])) ++callable;
  // A reply that ends without a call of an offered function is content, all of it (as
  // parse_tool_calls says of a <tool_call> block naming a function that was not offered); the
  // content sent so far is then a prefix of the text.
  if (final && !harmony && !opened_calls() && std::none_of(s.calls.begin(), s.calls.end(), offered)) s.content = text;
  if (s.content.size() > content_sent_) {
    d.content = s.content.substr(content_sent_);
    content_sent_ = s.content.size();
  }
  for (size_t i = 0; i < callable; ++i) {
    const PartialCall& pc = s.calls[i];
    const size_t sent = i < args_sent_.size() ? args_sent_[i] : 0;
    const std::string fresh = pc.args.size() > sent ? pc.args.substr(sent) : std::string();
    if (i >= args_sent_.size()) {  // the call opens: its index, id and name
      d.tool_calls.push_back({{"index", i},
                              {"id", id_prefix_ + std::to_string(i)},
                              {"type", "function"},
                              {"function", {{"name", pc.name}, {"arguments", fresh}}}});
      args_sent_.push_back(pc.args.size());
    } else if (!fresh.empty()) {
      d.tool_calls.push_back({{"index", i}, {"function", {{"arguments", fresh}}}});
      args_sent_[i] = pc.args.size();
    }
  }
  return d;
}

}  // namespace tessera::server

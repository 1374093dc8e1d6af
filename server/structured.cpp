#include "server/structured.h"

#include "models/chat_template/chat_template.h"
#include "server/errors.h"

namespace tessera::server {

using nlohmann::json;

namespace {

// The JSON Schema of a call of |tool|: {"name": <its name>, "arguments": <its parameters>}, its
// properties in that order (ordered_json), so the grammar has the model write the name first and
// a streamed call opens with its name before the arguments arrive (server/tool_stream.h).
nlohmann::ordered_json call_schema(const ToolSpec& tool) {
  using ordered = nlohmann::ordered_json;
  return ordered{{"type", "object"},
                 {"properties", ordered{{"name", ordered{{"type", "string"}, {"enum", ordered::array({tool.name})}}},
                                        {"arguments", ordered::parse(tool.parameters.dump())}}},
                 {"required", ordered::array({"name", "arguments"})},
                 {"additionalProperties", false}};
}

std::string tools_prompt(const std::vector<ToolSpec>& tools, const std::string& choice) {
  std::string s = "You can call these functions:\n";
  for (const ToolSpec& t : tools) {
    json f = {{"name", t.name}, {"parameters", t.parameters}};
    if (!t.description.empty()) f["description"] = t.description;
    s += dump(f) + "\n";
  }
  s += "To call a function, reply with only a JSON object: {\"name\": <function name>, \"arguments\": <an object of its "
       "parameters>}.";
  if (choice == "auto") s += " Otherwise reply with text.";
  return s;
}

std::optional<ApiError> read_schema(const json& v, const char* param, GrammarSpec* spec) {
  if (v.is_string()) {
    const json parsed = json::parse(v.get<std::string>(), nullptr, false);
    if (parsed.is_discarded()) return ApiError{400, std::string("'") + param + "' is not valid JSON", param, "invalid_schema"};
    spec->source = parsed.dump();
  } else if (v.is_object() || v.is_boolean()) {
    spec->source = v.dump();
  } else {
    return ApiError{400, std::string("'") + param + "' must be a JSON Schema object", param, "invalid_schema"};
  }
  spec->kind = GrammarSpec::Kind::kJsonSchema;
  return std::nullopt;
}

// response_format: text, json_object or json_schema. |asked| is set when it constrains.
std::optional<ApiError> read_response_format(const json& body, GrammarSpec* spec, std::string* param, bool* asked) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return std::nullopt;
  const json& rf = *it;
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    return ApiError{400, "'response_format' must be an object with a string 'type'", "response_format"};
  const std::string type = rf["type"].get<std::string>();
  *param = "response_format";
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    spec->kind = GrammarSpec::Kind::kJson;
    *asked = true;
    return std::nullopt;
  }
  if (type != "json_schema")
    return ApiError{400, "'response_format.type' is '" + type + "'; expected text, json_object or json_schema", "response_format.type"};
  const json& js = rf.contains("json_schema") ? rf["json_schema"] : json();
  if (!js.is_object() || !js.contains("schema"))
    return ApiError{400, "'response_format.json_schema' must be an object with a 'schema'", "response_format.json_schema"};
  if (auto e = read_schema(js["schema"], "response_format.json_schema.schema", spec)) return e;
  spec->strict = js.contains("strict") && js["strict"].is_boolean() && js["strict"].get<bool>();
  *param = "response_format.json_schema.schema";
  *asked = true;
  return std::nullopt;
}

// Tessera's extension, in vLLM's names: structured_outputs {json | regex | grammar | json_object}.
std::optional<ApiError> read_structured_outputs(const json& body, GrammarSpec* spec, std::string* param, bool* asked) {
  auto it = body.find("structured_outputs");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return ApiError{400, "'structured_outputs' must be an object", "structured_outputs"};
  int n = 0;
  for (const char* key : {"json", "regex", "grammar", "json_object"})
    if (it->contains(key) && !(*it)[key].is_null()) ++n;
  if (n != 1)
    return ApiError{400, "'structured_outputs' must hold exactly one of json, regex, grammar, json_object", "structured_outputs"};
  *asked = true;
  if (it->contains("json") && !(*it)["json"].is_null()) {
    *param = "structured_outputs.json";
    spec->strict = true;
    return read_schema((*it)["json"], "structured_outputs.json", spec);
  }
  if (it->contains("json_object") && !(*it)["json_object"].is_null()) {
    *param = "structured_outputs.json_object";
    spec->kind = GrammarSpec::Kind::kJson;
    return std::nullopt;
  }
  const bool regex = it->contains("regex") && !(*it)["regex"].is_null();
  *param = regex ? "structured_outputs.regex" : "structured_outputs.grammar";
  const json& v = (*it)[regex ? "regex" : "grammar"];
  if (!v.is_string()) return ApiError{400, "'" + *param + "' must be a string", *param};
  spec->kind = regex ? GrammarSpec::Kind::kRegex : GrammarSpec::Kind::kEbnf;
  spec->source = v.get<std::string>();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> prepare_tools(const Model& model, const json& body, json* messages, ParsedRequest* out) {
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) {
    if (body.contains("tool_choice") && !body["tool_choice"].is_null() && body["tool_choice"] != "none")
      return ApiError{400, "'tool_choice' needs 'tools'", "tool_choice"};
    return std::nullopt;
  }
  if (!it->is_array() || it->empty()) return ApiError{400, "'tools' must be a non-empty array", "tools"};
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || string_member(t, "type") != "function" || !t.contains("function") || !t["function"].is_object())
      return ApiError{400, "'" + where + "' must be {\"type\": \"function\", \"function\": {...}}", where};
    const json& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      return ApiError{400, "'" + where + ".function.name' must be a non-empty string", where + ".function.name"};
    ToolSpec spec;
    spec.name = f["name"].get<std::string>();
    if (f.contains("description") && f["description"].is_string()) spec.description = f["description"].get<std::string>();
    spec.parameters = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"] : json{{"type", "object"}};
    if (!spec.parameters.is_object())
      return ApiError{400, "'" + where + ".function.parameters' must be a JSON Schema object", where + ".function.parameters"};
    out->tools.push_back(std::move(spec));
  }
  std::string choice = "auto";
  if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    if (c->is_string()) {
      choice = c->get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required")
        return ApiError{400, "'tool_choice' is '" + choice + "'; expected none, auto, required or a named function", "tool_choice"};
    } else if (c->is_object() && string_member(*c, "type") == "function" && c->contains("function") && (*c)["function"].is_object() &&
               (*c)["function"].contains("name") && (*c)["function"]["name"].is_string()) {
      const std::string name = (*c)["function"]["name"].get<std::string>();
      bool found = false;
      for (const ToolSpec& t : out->tools) found |= t.name == name;
      if (!found) return ApiError{400, "'tool_choice' names the function '" + name + "', which 'tools' does not offer", "tool_choice"};
      choice = "named";
      out->tool_named = name;
    } else {
      return ApiError{400, "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                      "tool_choice"};
    }
  }
  if (choice == "none") {
    out->tools.clear();
    return std::nullopt;
  }
  out->tool_choice = choice;
  if (!model.chat_template().empty()) {
    auto tpl = ChatTemplate::parse(model.chat_template());
    if (tpl.ok() && tpl->uses_tools()) {
      out->tools_json = (*it).dump();
      return std::nullopt;
    }
  }
  // The tools go first, in a system turn of their own; a client's system turn follows.
  json sys = {{"role", "system"}, {"content", tools_prompt(out->tools, choice)}};
  if (messages->is_array()) messages->insert(messages->begin(), sys);
  return std::nullopt;
}

std::optional<ApiError> prepare_grammar(ServerContext& ctx, const json& body, ParsedRequest* out) {
  GrammarSpec spec;
  std::string param;
  bool asked = false;
  if (auto e = read_response_format(body, &spec, &param, &asked)) return e;
  bool asked_ext = false;
  GrammarSpec ext;
  std::string ext_param;
  if (auto e = read_structured_outputs(body, &ext, &ext_param, &asked_ext)) return e;
  if (asked && asked_ext)
    return ApiError{400, "'response_format' and 'structured_outputs' both constrain the output: give one", "structured_outputs"};
  if (asked_ext) spec = ext, param = ext_param, asked = true;
  const bool forced_tool = out->tool_choice == "required" || out->tool_choice == "named";
  if (forced_tool && asked)
    return ApiError{400, "'tool_choice' " + out->tool_choice + " and '" + param + "' both constrain the output: give one", param};
  if (forced_tool) {
    nlohmann::ordered_json schema;
    if (out->tool_choice == "named") {
      for (const ToolSpec& t : out->tools)
        if (t.name == out->tool_named) schema = call_schema(t);
    } else {
      nlohmann::ordered_json any = nlohmann::ordered_json::array();
      for (const ToolSpec& t : out->tools) any.push_back(call_schema(t));
      schema = any.size() == 1 ? any[0] : nlohmann::ordered_json{{"anyOf", any}};
    }
    spec.kind = GrammarSpec::Kind::kJsonSchema;
    spec.source = schema.dump();
    spec.strict = true;
    param = "tools";
    asked = true;
  }
  if (!asked) return std::nullopt;
  if (!ctx.grammars)
    return ApiError{400, ctx.grammar_why.empty() ? "structured output is unavailable: this server has no grammar compiler" : ctx.grammar_why,
                    param, "structured_output_unavailable"};
  auto g = ctx.grammars->compile(spec);
  if (!g.ok()) return ApiError{400, "'" + param + "': " + g.status().message(), param, "invalid_grammar"};
  out->gen.grammar = std::move(g).value();
  return std::nullopt;
}

const ToolSpec* offered_tool(const ParsedRequest& req, const std::string& name) {
  for (const ToolSpec& t : req.tools)
    if (t.name == name) return &t;
  return nullptr;
}

json xml_parameter_value(const ToolSpec& tool, const std::string& key, std::string value) {
  // One newline on each side is the format's own.
  if (!value.empty() && value.front() == '\n') value.erase(0, 1);
  if (!value.empty() && value.back() == '\n') value.pop_back();
  std::string type;
  if (tool.parameters.is_object() && tool.parameters.contains("properties") &&
      tool.parameters["properties"].is_object() && tool.parameters["properties"].contains(key) &&
      tool.parameters["properties"][key].is_object())
    type = string_member(tool.parameters["properties"][key], "type");
  json v = type == "string" || type.empty() ? json(value) : json::parse(value, nullptr, false);
  return v.is_discarded() ? json(value) : v;
}

namespace {

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1));
}

const ToolSpec* offered(const ParsedRequest& req, const std::string& name) { return offered_tool(req, name); }

// {"name": ..., "arguments": {...}} (Hermes; the grammar-forced form): the call, or null.
json json_call(const ParsedRequest& req, const std::string& body) {
  const json v = json::parse(body, nullptr, false);
  if (v.is_discarded() || !v.is_object() || !v.contains("name") || !v["name"].is_string() || !v.contains("arguments"))
    return nullptr;
  const std::string name = v["name"].get<std::string>();
  if (!offered(req, name)) return nullptr;
  const json& args = v["arguments"];
  return {{"name", name}, {"arguments", args.is_string() ? args.get<std::string>() : dump(args)}};
}

// <function=NAME><parameter=P>value</parameter>...</function> (Qwen3-Coder, Qwen3.5): values are
// text; a parameter whose schema type is not string is read as JSON when it parses as such.
json xml_call(const ParsedRequest& req, const std::string& body) {
  const std::string open = "<function=";
  const size_t f = body.find(open);
  if (f == std::string::npos) return nullptr;
  const size_t name_end = body.find('>', f);
  if (name_end == std::string::npos) return nullptr;
  const std::string name = trim(std::string_view(body).substr(f + open.size(), name_end - f - open.size()));
  const ToolSpec* tool = offered(req, name);
  if (!tool) return nullptr;
  const size_t fn_end = body.find("</function>", name_end);
  const std::string_view inner = std::string_view(body).substr(name_end + 1, fn_end == std::string::npos ? std::string::npos : fn_end - name_end - 1);
  json args = json::object();
  size_t at = 0;
  for (;;) {
    const size_t p = inner.find("<parameter=", at);
    if (p == std::string_view::npos) break;
    const size_t pn = inner.find('>', p);
    if (pn == std::string_view::npos) return nullptr;
    const std::string key = trim(inner.substr(p + 11, pn - p - 11));
    size_t pe = inner.find("</parameter>", pn);
    const size_t next = inner.find("<parameter=", pn);
    if (pe == std::string_view::npos || (next != std::string_view::npos && next < pe)) pe = next;  // an unclosed parameter
    std::string value(inner.substr(pn + 1, pe == std::string_view::npos ? std::string_view::npos : pe - pn - 1));
    args[key] = xml_parameter_value(*tool, key, std::move(value));
    if (pe == std::string_view::npos) break;
    at = pe;
  }
  return {{"name", name}, {"arguments", dump(args)}};
}

// gpt-oss's harmony messages: a call is a message whose header names a recipient,
// "<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{args}" (the recipient may
// also stand in the role header, "<|start|>assistant to=functions.NAME<|channel|>..."), ended by
// <|call|> (an end-of-generation token, so usually not in the text), <|end|> or the text's end.
// Messages are separated by "<|start|>assistant". Messages without a recipient (a commentary
// preamble, a final answer) are the text beside the calls. Null unless at least one message is a
// call, each call names an offered function and its arguments are a JSON object.
json harmony_calls(const ParsedRequest& req, std::string_view text, std::string* before) {
  static constexpr std::string_view kStart = "<|start|>assistant", kMessage = "<|message|>", kTo = "to=functions.";
  json calls = json::array();
  std::string prose;
  size_t at = 0;
  while (at < text.size()) {
    size_t next = text.find(kStart, at);
    if (next == at) {
      at += kStart.size();
      continue;
    }
    const std::string_view msg = text.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at);
    at = next == std::string_view::npos ? text.size() : next;
    const size_t m = msg.find(kMessage);
    if (m == std::string_view::npos) {  // no header: text of its own
      if (!trim(msg).empty()) prose += (prose.empty() ? "" : "\n") + trim(msg);
      continue;
    }
    const std::string_view header = msg.substr(0, m);
    std::string_view body = msg.substr(m + kMessage.size());
    for (std::string_view end :
         {std::string_view("<|call|>"), std::string_view("<|end|>"), std::string_view("<|return|>")})
      if (const size_t e = body.find(end); e != std::string_view::npos) body = body.substr(0, e);
    const size_t to = header.find(kTo);
    if (to == std::string_view::npos) {
      if (!trim(body).empty()) prose += (prose.empty() ? "" : "\n") + trim(body);
      continue;
    }
    const size_t name_at = to + kTo.size();
    const size_t name_end = header.find_first_of(" \t\r\n<", name_at);
    const std::string name(
        header.substr(name_at, name_end == std::string_view::npos ? std::string_view::npos : name_end - name_at));
    if (!offered(req, name)) return nullptr;
    const json args = json::parse(body, nullptr, false);
    if (args.is_discarded() || !args.is_object()) return nullptr;
    calls.push_back({{"name", name}, {"arguments", dump(args)}});
  }
  if (calls.empty()) return nullptr;
  if (before) *before = prose;
  return calls;
}

}  // namespace

json parse_tool_calls(const ParsedRequest& req, const std::string& text, const std::string& id_prefix, std::string* before) {
  if (req.tools.empty()) return nullptr;
  json calls = json::array();
  auto add = [&](json fn) {
    calls.push_back({{"id", id_prefix + std::to_string(calls.size())}, {"type", "function"}, {"function", std::move(fn)}});
  };
  if (text.find("<|message|>") != std::string::npos && text.find("to=functions.") != std::string::npos) {
    json fns = harmony_calls(req, text, before);
    if (fns.is_null()) return nullptr;
    for (json& fn : fns) add(std::move(fn));
    return calls;
  }
  // Hermes-style templates (Qwen 2.5/3, many others) wrap each call in <tool_call> tags; Qwen3.5's
  // holds an XML function inside them. Every block must be a call of an offered function.
  const size_t first = text.find("<tool_call>");
  if (first == std::string::npos) {
    json fn = json_call(req, text);
    if (fn.is_null()) return nullptr;
    add(std::move(fn));
    if (before) before->clear();
    return calls;
  }
  size_t at = first;
  while (at != std::string::npos) {
    const size_t body = at + 11, close = text.find("</tool_call>", body);
    const std::string block = trim(std::string_view(text).substr(body, close == std::string::npos ? std::string::npos : close - body));
    json fn = block.rfind("<function=", 0) == 0 ? xml_call(req, block) : json_call(req, block);
    if (fn.is_null()) return nullptr;
    add(std::move(fn));
    if (close == std::string::npos) break;
    at = text.find("<tool_call>", close + 12);
    if (at == std::string::npos && !trim(std::string_view(text).substr(close + 12)).empty()) return nullptr;  // text after the calls
  }
  if (before) *before = trim(std::string_view(text).substr(0, first));
  return calls;
}

}  // namespace tessera::server

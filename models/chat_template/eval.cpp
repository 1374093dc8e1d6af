// Evaluator: walks the statement tree with Jinja's scoping (a for loop has its own scope;
// namespace() objects carry values out of it) and Python value semantics.
#include <algorithm>
#include <cctype>
#include <limits>
#include <unordered_map>

#include "models/chat_template/chat_template.h"
#include "models/chat_template/jinja.h"

#include <nlohmann/json.hpp>

namespace tessera {
namespace jinja {
namespace {

class Renderer {
 public:
  explicit Renderer(std::unordered_map<std::string, Value> globals) { scopes_.push_back(std::move(globals)); }
  // `set ns.x = ns` (or a list holding ns) makes a namespace own itself through shared_ptr, a
  // cycle that would leak; emptying every namespace that was assigned to breaks all of them.
  // Nothing outlives the render but the output string, so no one sees the emptied dicts.
  ~Renderer() {
    for (const auto& d : assigned_namespaces_) d->clear();
  }
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;
  Status exec_body(const Body& body, std::string& out);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Status exec(const Stmt& s, std::string& out);
  Status exec_for(const Stmt& s, std::string& out);
  Status exec_set(const Stmt& s, std::string& out);
  Result<Value> eval(const Expr& e);  // eval_expr, then the value bounds of jinja.h
  Result<Value> eval_expr(const Expr& e);
  Result<Value> eval_binary(const Expr& e);
  Result<Value> eval_call(const Expr& e);
  Result<Value> eval_item(const Expr& e);
  Result<Value> call_macro(const Stmt& m, const CallArgs& args, Pos pos);
  Status eval_args(const std::vector<Arg>& in, CallArgs& out);
  Value lookup(const std::string& name) const;
  Status bind(const std::vector<std::string>& targets, const Value& v, Pos pos);
  static Status error(Pos p, const std::string& what) {
    return InvalidArgument("chat template: " + pos_str(p) + ": " + what);
  }
  static Status at(Pos p, const Status& s) {  // position a builtin's error
    return s.ok() ? s : Status(s.code() == StatusCode::kNotFound ? StatusCode::kInvalidArgument : s.code(),
                               "chat template: " + pos_str(p) + ": " + s.message());
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
  std::vector<std::shared_ptr<Dict>> assigned_namespaces_;  // see ~Renderer
  std::unordered_map<std::string, const Stmt*> macros_;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;  // macro recursion guard
  static constexpr int kMaxEvalDepth = 256;
  int eval_depth_ = 0;  // nesting of eval() calls (see eval)
  int64_t steps_ = 0;
  static constexpr int64_t kMaxSteps = 2'000'000;
  static constexpr size_t kMaxOutput = 64u << 20;
};

Value undefined_named(const std::string& what) {
  Value v;
  v.s = what;  // kept only for error messages; an undefined prints as ""
  return v;
}

Value Renderer::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto found = it->find(name);
    if (found != it->end()) return found->second;
  }
  return undefined_named("'" + name + "' is undefined");
}

Status Renderer::bind(const std::vector<std::string>& targets, const Value& v, Pos pos) {
  if (targets.size() == 1) {
    scopes_.back()[targets[0]] = v;
    return OkStatus();
  }
  if (v.type != Value::Type::kList || v.list->size() != targets.size())
    return error(pos, "cannot unpack " + std::string(type_name(v)) + " into " + std::to_string(targets.size()) + " names");
  for (size_t k = 0; k < targets.size(); ++k) scopes_.back()[targets[k]] = (*v.list)[k];
  return OkStatus();
}

Status Renderer::exec_body(const Body& body, std::string& out) {
  for (const auto& s : body) {
    TS_RETURN_IF_ERROR(exec(*s, out));
    if (flow_ != Flow::kNormal) return OkStatus();
  }
  return OkStatus();
}

Status Renderer::exec(const Stmt& s, std::string& out) {
  // A budget on executed statements and output size: a hostile template (a macro that calls
  // itself twice per level) gets an error instead of running for hours or filling memory.
  if (++steps_ > kMaxSteps || out.size() > kMaxOutput)
    return ResourceExhausted("chat template: " + pos_str(s.pos) + ": rendering exceeded " +
                             std::to_string(kMaxSteps) + " steps or " + std::to_string(kMaxOutput) + " bytes");
  switch (s.kind) {
    case Stmt::Kind::kText: out += s.text; return OkStatus();
    case Stmt::Kind::kOutput: {
      TS_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
      out += to_str(v);
      return OkStatus();
    }
    case Stmt::Kind::kIf:
      for (size_t k = 0; k < s.conds.size(); ++k) {
        TS_ASSIGN_OR_RETURN(Value c, eval(*s.conds[k]));
        if (truthy(c)) return exec_body(s.bodies[k], out);
      }
      if (s.bodies.size() > s.conds.size()) return exec_body(s.bodies.back(), out);
      return OkStatus();
    case Stmt::Kind::kFor: return exec_for(s, out);
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock: return exec_set(s, out);
    case Stmt::Kind::kBreak: flow_ = Flow::kBreak; return OkStatus();
    case Stmt::Kind::kContinue: flow_ = Flow::kContinue; return OkStatus();
    case Stmt::Kind::kBody: return exec_body(s.bodies[0], out);
    case Stmt::Kind::kMacro: macros_[s.text] = &s; return OkStatus();
  }
  return OkStatus();
}

Status Renderer::exec_set(const Stmt& s, std::string& out) {
  Value v;
  if (s.kind == Stmt::Kind::kSetBlock) {
    std::string captured;
    TS_RETURN_IF_ERROR(exec_body(s.bodies[0], captured));
    v = Value::string(std::move(captured));
  } else {
    TS_ASSIGN_OR_RETURN(v, eval(*s.expr));
  }
  if (s.attr.empty()) return bind(s.targets, v, s.pos);
  Value ns = lookup(s.targets[0]);
  if (!ns.is_namespace) return error(s.pos, "cannot set attribute '" + s.attr + "' of " + type_name(ns) + " '" + s.targets[0] + "' (only of a namespace)");
  ns.set(s.attr, std::move(v));  // the dict is shared, so every alias sees it
  if (std::find(assigned_namespaces_.begin(), assigned_namespaces_.end(), ns.dict) == assigned_namespaces_.end())
    assigned_namespaces_.push_back(ns.dict);
  return OkStatus();
}

Status Renderer::exec_for(const Stmt& s, std::string& out) {
  TS_ASSIGN_OR_RETURN(Value seq, eval(*s.expr));
  auto items_or = iterate(seq);
  if (!items_or.ok()) return at(s.pos, items_or.status());
  List items = std::move(items_or).value();
  scopes_.emplace_back();
  if (!s.conds.empty()) {  // {% for x in xs if cond %}: filter first, so loop.length counts kept items
    List kept;
    for (const Value& item : items) {
      TS_RETURN_IF_ERROR(bind(s.targets, item, s.pos));
      TS_ASSIGN_OR_RETURN(Value keep, eval(*s.conds[0]));
      if (truthy(keep)) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    const auto& item = items[static_cast<size_t>(k)];
    TS_RETURN_IF_ERROR(bind(s.targets, item, s.pos));
    Value loop = Value::make_dict({
        {"index", Value::integer(k + 1)}, {"index0", Value::integer(k)},
        {"revindex", Value::integer(n - k)}, {"revindex0", Value::integer(n - k - 1)},
        {"first", Value::boolean(k == 0)}, {"last", Value::boolean(k == n - 1)},
        {"length", Value::integer(n)},
        {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value{}},
        {"nextitem", k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value{}}});
    scopes_.back()["loop"] = std::move(loop);
    TS_RETURN_IF_ERROR(exec_body(s.bodies[0], out));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  scopes_.pop_back();
  if (n == 0 && s.bodies.size() > 1) return exec_body(s.bodies[1], out);
  return OkStatus();
}

Status Renderer::eval_args(const std::vector<Arg>& in, CallArgs& out) {
  for (const Arg& a : in) {
    TS_ASSIGN_OR_RETURN(Value v, eval(*a.value));
    if (a.name.empty()) out.pos.push_back(std::move(v));
    else out.kw.emplace_back(a.name, std::move(v));
  }
  return OkStatus();
}

Result<Value> Renderer::call_macro(const Stmt& m, const CallArgs& args, Pos pos) {
  if (depth_ > 50) return error(pos, "macro '" + m.text + "' recursed too deeply");
  scopes_.emplace_back();
  for (size_t k = 0; k < m.targets.size(); ++k) {
    const Value* v = args.get(k, m.targets[k]);
    if (v) {
      scopes_.back()[m.targets[k]] = *v;
    } else if (m.defaults[k]) {
      auto d = eval(*m.defaults[k]);
      if (!d.ok()) { scopes_.pop_back(); return d.status(); }
      scopes_.back()[m.targets[k]] = *d;
    } else {
      scopes_.back()[m.targets[k]] = Value{};
    }
  }
  std::string out;
  ++depth_;
  Status st = exec_body(m.bodies[0], out);
  --depth_;
  flow_ = Flow::kNormal;
  scopes_.pop_back();
  TS_RETURN_IF_ERROR(st);
  return Value::string(std::move(out));
}

Result<Value> Renderer::eval_call(const Expr& e) {
  const Expr& callee = *e.kids[0];
  CallArgs args;
  TS_RETURN_IF_ERROR(eval_args(e.args, args));
  if (callee.kind == Expr::Kind::kAttr) {
    TS_ASSIGN_OR_RETURN(Value obj, eval(*callee.kids[0]));
    if (obj.is_undefined()) return error(e.pos, obj.s.empty() ? "call on an undefined value" : obj.s);
    auto r = call_method(obj, callee.name, args);
    if (!r.ok()) return at(e.pos, r.status());
    return r;
  }
  if (callee.kind != Expr::Kind::kName) return error(e.pos, "this expression cannot be called");
  if (callee.name == "raise_exception") {
    const Value* msg = args.get(0, "message");
    return InvalidArgument(msg ? to_str(*msg) : "raise_exception called");
  }
  auto macro = macros_.find(callee.name);
  if (macro != macros_.end()) return call_macro(*macro->second, args, e.pos);
  auto r = call_global(callee.name, args);
  if (!r.ok()) return at(e.pos, r.status());
  return r;
}

// Python-style index and slice bounds for a sequence of |n| items.
int64_t clamp_index(const Value* v, int64_t def, int64_t n, bool negative_step) {
  if (!v || v->type == Value::Type::kNone || v->is_undefined()) return def;
  int64_t k = v->i;
  if (k < 0) k += n;
  const int64_t lo = negative_step ? -1 : 0, hi = negative_step ? n - 1 : n;
  return k < lo ? lo : k > hi ? hi : k;
}

Result<Value> Renderer::eval_item(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value obj, eval(*e.kids[0]));
  if (obj.is_undefined()) return error(e.pos, obj.s.empty() ? "subscript of an undefined value" : obj.s);
  if (e.kind == Expr::Kind::kSlice) {
    Value bounds[3];
    for (int k = 0; k < 3; ++k) {
      if (!e.kids[static_cast<size_t>(k + 1)]) continue;
      TS_ASSIGN_OR_RETURN(bounds[k], eval(*e.kids[static_cast<size_t>(k + 1)]));
      if (bounds[k].type != Value::Type::kInt && bounds[k].type != Value::Type::kNone)
        return error(e.pos, "slice bounds must be integers");
    }
    const int64_t step = bounds[2].type == Value::Type::kInt ? bounds[2].i : 1;
    if (step == 0) return error(e.pos, "slice step cannot be zero");
    TS_ASSIGN_OR_RETURN(List items, iterate(obj));
    const auto n = static_cast<int64_t>(items.size());
    const int64_t start = clamp_index(&bounds[0], step > 0 ? 0 : n - 1, n, step < 0);
    const int64_t stop = clamp_index(&bounds[1], step > 0 ? n : -1, n, step < 0);
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) out.push_back(items[static_cast<size_t>(k)]);
    if (obj.type != Value::Type::kString) return Value::make_list(std::move(out));
    std::string s;
    for (const Value& c : out) s += c.s;
    return Value::string(std::move(s));
  }
  TS_ASSIGN_OR_RETURN(Value key, eval(*e.kids[1]));
  if (obj.type == Value::Type::kDict) {
    const Value* v = obj.find(to_str(key));
    return v ? *v : undefined_named("dict has no key " + repr(key));
  }
  if ((obj.type == Value::Type::kList || obj.type == Value::Type::kString) && key.type == Value::Type::kInt) {
    TS_ASSIGN_OR_RETURN(List items, iterate(obj));
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t k = key.i < 0 ? key.i + n : key.i;
    if (k < 0 || k >= n) return undefined_named(std::string(type_name(obj)) + " index " + std::to_string(key.i) + " out of range");
    return items[static_cast<size_t>(k)];
  }
  return undefined_named(std::string(type_name(obj)) + " has no item " + repr(key));
}

Result<Value> Renderer::eval(const Expr& e) {
  // The parser bounds recursion while it parses, but a chain like a+b+c+... is parsed in a loop
  // into a left-deep tree that evaluation walks recursively: bound that walk as well (counted
  // across macro calls), or 2,000 terms overflow the stack (found by chat_template_fuzz).
  if (eval_depth_ >= kMaxEvalDepth)
    return error(e.pos, "expression nested deeper than " + std::to_string(kMaxEvalDepth) + " levels");
  ++eval_depth_;
  auto r = eval_expr(e);
  --eval_depth_;
  TS_ASSIGN_OR_RETURN(Value v, std::move(r));
  // Checked on every (sub)expression, so values that grow step by step (s ~ s in a loop) stop
  // at the bound instead of doubling until memory runs out.
  if (v.type == Value::Type::kString && v.s.size() > kMaxStringBytes)
    return at(e.pos, value_too_large("a string of " + std::to_string(v.s.size()) + " bytes"));
  if (v.type == Value::Type::kList && v.list->size() > kMaxListItems)
    return at(e.pos, value_too_large("a list of " + std::to_string(v.list->size()) + " items"));
  return v;
}

Result<Value> Renderer::eval_expr(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral: return e.literal;
    case Expr::Kind::kName: return lookup(e.name);
    case Expr::Kind::kAttr: {
      TS_ASSIGN_OR_RETURN(Value obj, eval(*e.kids[0]));
      if (obj.is_undefined()) return error(e.pos, obj.s.empty() ? "attribute of an undefined value" : obj.s);
      const Value* v = obj.find(e.name);
      return v ? *v : undefined_named(std::string(type_name(obj)) + " has no attribute '" + e.name + "'");
    }
    case Expr::Kind::kItem:
    case Expr::Kind::kSlice: return eval_item(e);
    case Expr::Kind::kCall: return eval_call(e);
    case Expr::Kind::kFilter: {
      TS_ASSIGN_OR_RETURN(Value in, eval(*e.kids[0]));
      CallArgs args;
      TS_RETURN_IF_ERROR(eval_args(e.args, args));
      auto r = apply_filter(e.name, in, args);
      if (!r.ok()) return at(e.pos, r.status());
      return r;
    }
    case Expr::Kind::kTest: {
      TS_ASSIGN_OR_RETURN(Value in, eval(*e.kids[0]));
      CallArgs args;
      TS_RETURN_IF_ERROR(eval_args(e.args, args));
      auto r = apply_test(e.name, in, args);
      if (!r.ok()) return at(e.pos, r.status());
      return Value::boolean(*r != e.negated);
    }
    case Expr::Kind::kUnary: {
      TS_ASSIGN_OR_RETURN(Value v, eval(*e.kids[0]));
      if (v.type == Value::Type::kInt && e.name == "-" && v.i == std::numeric_limits<int64_t>::min())
        return error(e.pos, "integer overflow: -(" + std::to_string(v.i) + ") does not fit in 64 bits");
      if (v.type == Value::Type::kInt) return Value::integer(e.name == "-" ? -v.i : v.i);
      if (v.type == Value::Type::kFloat) return Value::number(e.name == "-" ? -v.f : v.f);
      return error(e.pos, "bad operand type for unary " + e.name + ": " + type_name(v));
    }
    case Expr::Kind::kBinary: return eval_binary(e);
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {  // Python: returns the operand that decided
      TS_ASSIGN_OR_RETURN(Value l, eval(*e.kids[0]));
      if (truthy(l) == (e.kind == Expr::Kind::kOr)) return l;
      return eval(*e.kids[1]);
    }
    case Expr::Kind::kNot: {
      TS_ASSIGN_OR_RETURN(Value v, eval(*e.kids[0]));
      return Value::boolean(!truthy(v));
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      List items;
      for (const auto& k : e.kids) {
        TS_ASSIGN_OR_RETURN(Value v, eval(*k));
        items.push_back(std::move(v));
      }
      return Value::make_list(std::move(items));
    }
    case Expr::Kind::kDict: {
      Value d = Value::make_dict();
      for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
        TS_ASSIGN_OR_RETURN(Value key, eval(*e.kids[k]));
        TS_ASSIGN_OR_RETURN(Value v, eval(*e.kids[k + 1]));
        d.set(to_str(key), std::move(v));
      }
      return d;
    }
    case Expr::Kind::kCond: {
      TS_ASSIGN_OR_RETURN(Value c, eval(*e.kids[1]));
      if (truthy(c)) return eval(*e.kids[0]);
      if (e.kids.size() > 2) return eval(*e.kids[2]);
      return Value{};
    }
  }
  return error(e.pos, "unknown expression");
}

Result<Value> Renderer::eval_binary(const Expr& e) {
  TS_ASSIGN_OR_RETURN(Value l, eval(*e.kids[0]));
  TS_ASSIGN_OR_RETURN(Value r, eval(*e.kids[1]));
  auto v = binary_op(e.name, l, r);
  if (!v.ok()) return at(e.pos, v.status());
  return v;
}

}  // namespace
}  // namespace jinja

namespace {

// The identifier |name| as a whole word anywhere in |src| (templates name `tools` only to read it).
bool mentions(std::string_view src, std::string_view name) {
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = src.find(name); at != std::string_view::npos; at = src.find(name, at + 1))
    if ((at == 0 || !ident(src[at - 1])) && (at + name.size() == src.size() || !ident(src[at + name.size()]))) return true;
  return false;
}

jinja::Value from_json(const nlohmann::json& j) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      jinja::List items;
      for (const auto& v : j) items.push_back(from_json(v));
      return Value::make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      jinja::Dict items;
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), from_json(it.value()));
      return Value::make_dict(std::move(items));
    }
    default: return Value::none();
  }
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view jinja_source) {
  TS_ASSIGN_OR_RETURN(auto tokens, jinja::lex(jinja_source));
  TS_ASSIGN_OR_RETURN(auto tmpl, jinja::parse_template(std::move(tokens)));
  return ChatTemplate(std::shared_ptr<const jinja::Template>(std::move(tmpl)), mentions(jinja_source, "tools"));
}

bool ChatTemplate::uses_tools() const { return uses_tools_; }

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt,
                                         const std::map<std::string, std::string>& extra,
                                         std::string_view tools_json, std::string_view kwargs_json) const {
  using jinja::Value;
  jinja::List list;
  for (const ChatMessage& m : messages)
    list.push_back(Value::make_dict({{"role", Value::string(m.role)}, {"content", Value::string(m.content)}}));
  std::unordered_map<std::string, Value> globals;
  globals["messages"] = Value::make_list(std::move(list));
  globals["add_generation_prompt"] = Value::boolean(add_generation_prompt);
  globals["bos_token"] = Value::string("");
  globals["eos_token"] = Value::string("");
  for (const auto& [k, v] : extra) globals[k] = Value::string(v);
  if (!tools_json.empty()) {
    const nlohmann::json tools = nlohmann::json::parse(tools_json, nullptr, /*allow_exceptions=*/false);
    if (tools.is_discarded() || !tools.is_array()) return InvalidArgument("chat template: tools must be a JSON array");
    globals["tools"] = from_json(tools);
  }
  if (!kwargs_json.empty()) {
    const nlohmann::json kw = nlohmann::json::parse(kwargs_json, nullptr, /*allow_exceptions=*/false);
    if (kw.is_discarded() || !kw.is_object()) return InvalidArgument("chat template: kwargs must be a JSON object");
    for (const auto& [k, v] : kw.items()) {
      if (k == "messages" || k == "tools" || k == "add_generation_prompt")
        return InvalidArgument("chat template: kwargs may not set '" + k + "'");
      globals[k] = from_json(v);
    }
  }
  jinja::Renderer renderer(std::move(globals));
  std::string out;
  TS_RETURN_IF_ERROR(renderer.exec_body(tmpl_->body, out));
  return out;
}

}  // namespace tessera

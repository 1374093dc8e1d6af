// Built-in filters, string/dict methods, tests and global functions that chat templates use.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <limits>

#include "models/chat_template/jinja.h"
#include "models/tokenizer/unicode.h"

namespace tessera::jinja {

const Value* CallArgs::get(size_t index, std::string_view name) const {
  if (index < pos.size()) return &pos[index];
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

namespace {

Status bad_arg(const std::string& fn, const std::string& what) {
  return InvalidArgument(fn + ": " + what);
}

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> cps;
  for (size_t pos = 0; pos < s.size();) cps.push_back(utf8_next(s, pos));
  return cps;
}

std::string from_code_points(const std::vector<uint32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) utf8_append(out, cps[k]);
  return out;
}

// Python's str.strip/lstrip/rstrip; |chars| null means whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<uint32_t> set;
  const bool use_set = chars && chars->type == Value::Type::kString;
  if (use_set) set = code_points(chars->s);
  auto strip = [&](uint32_t cp) {
    return use_set ? std::find(set.begin(), set.end(), cp) != set.end() : py_isspace(cp);
  };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && strip(cps[b])) ++b;
  if (right) while (e > b && strip(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return s;
}

std::string title_case(std::string s, bool first_only) {
  bool start = true;
  for (char& c : s) {
    const bool alpha = (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    if (alpha) {
      c = start ? static_cast<char>(c & ~0x20) : static_cast<char>(c | 0x20);
      start = false;
    } else if (!first_only) {
      start = true;
    }
  }
  return s;
}

Result<Value> py_split(const std::string& s, const Value* sep, const Value* maxsplit) {
  int64_t limit = maxsplit && maxsplit->type == Value::Type::kInt ? maxsplit->i : -1;
  List parts;
  if (!sep || sep->type == Value::Type::kNone || sep->is_undefined()) {
    const auto cps = code_points(s);
    size_t k = 0;
    while (k < cps.size()) {
      while (k < cps.size() && py_isspace(cps[k])) ++k;
      if (k == cps.size()) break;
      size_t e = k;
      if (limit == 0) e = cps.size();
      else while (e < cps.size() && !py_isspace(cps[e])) ++e;
      if (limit == 0) {
        size_t t = e;
        while (t > k && py_isspace(cps[t - 1])) --t;
        parts.push_back(Value::string(from_code_points(cps, k, t)));
      } else {
        parts.push_back(Value::string(from_code_points(cps, k, e)));
      }
      if (limit > 0) --limit;
      k = e;
    }
    return Value::make_list(std::move(parts));
  }
  if (sep->type != Value::Type::kString || sep->s.empty()) return bad_arg("split", "empty or non-string separator");
  size_t start = 0;
  while (limit != 0) {
    const size_t at = s.find(sep->s, start);
    if (at == std::string::npos) break;
    parts.push_back(Value::string(s.substr(start, at - start)));
    start = at + sep->s.size();
    if (limit > 0) --limit;
  }
  parts.push_back(Value::string(s.substr(start)));
  return Value::make_list(std::move(parts));
}

bool affix_match(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.type == Value::Type::kList) {
    for (const Value& v : *arg.list) if (v.type == Value::Type::kString && one(v.s)) return true;
    return false;
  }
  return arg.type == Value::Type::kString && one(arg.s);
}

Result<std::string> replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t start = 0;
  while (count != 0) {
    const size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    if (out.size() + (at - start) + to.size() > kMaxStringBytes) return value_too_large("the result of replace()");
    out += s.substr(start, at - start) + to;
    start = at + from.size();
    if (count > 0) --count;
  }
  return out + s.substr(start);
}

Value attribute_of(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const Value* next = cur.find(key);
    if (!next) return Value{};
    cur = *next;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Result<Value> select_attr(const Value& in, const CallArgs& args, bool reject) {
  const Value* attr = args.get(0, "attribute");
  if (!attr || attr->type != Value::Type::kString) return bad_arg("selectattr", "needs an attribute name");
  TS_ASSIGN_OR_RETURN(List items, iterate(in));
  CallArgs test_args;
  for (size_t k = 2; k < args.pos.size(); ++k) test_args.pos.push_back(args.pos[k]);
  List out;
  for (const Value& item : items) {
    const Value v = attribute_of(item, attr->s);
    bool pass = truthy(v);
    if (args.pos.size() > 1) {
      if (args.pos[1].type != Value::Type::kString) return bad_arg("selectattr", "test name must be a string");
      TS_ASSIGN_OR_RETURN(pass, apply_test(args.pos[1].s, v, test_args));
    }
    if (pass != reject) out.push_back(item);
  }
  return Value::make_list(std::move(out));
}

Result<Value> string_method(const std::string& s, const std::string& name, const CallArgs& a) {
  const Value* a0 = a.get(0, "");
  if (name == "strip") return Value::string(py_strip(s, a0, true, true));
  if (name == "lstrip") return Value::string(py_strip(s, a0, true, false));
  if (name == "rstrip") return Value::string(py_strip(s, a0, false, true));
  if (name == "upper") return Value::string(ascii_case(s, true));
  if (name == "lower") return Value::string(ascii_case(s, false));
  if (name == "title") return Value::string(title_case(s, false));
  if (name == "capitalize") return Value::string(title_case(ascii_case(s, false), true));
  if (name == "startswith" || name == "endswith") {
    if (!a0) return bad_arg(name, "needs an argument");
    return Value::boolean(affix_match(s, *a0, name == "startswith"));
  }
  if (name == "split") return py_split(s, a.get(0, "sep"), a.get(1, "maxsplit"));
  if (name == "replace") {
    const Value* to = a.get(1, "");
    if (!a0 || !to || a0->type != Value::Type::kString || to->type != Value::Type::kString)
      return bad_arg("replace", "needs two strings");
    const Value* count = a.get(2, "count");
    TS_ASSIGN_OR_RETURN(std::string out, replace_all(s, a0->s, to->s, count ? count->i : -1));
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "count") {
    if (!a0 || a0->type != Value::Type::kString) return bad_arg(name, "needs a string");
    if (name == "find") {
      const size_t at = s.find(a0->s);
      return Value::integer(at == std::string::npos ? -1 : static_cast<int64_t>(utf8_length(s.substr(0, at))));
    }
    int64_t n = 0;
    for (size_t at = s.find(a0->s); !a0->s.empty() && at != std::string::npos; at = s.find(a0->s, at + a0->s.size())) ++n;
    return Value::integer(n);
  }
  if (name == "join") {
    if (!a0) return bad_arg("join", "needs a list");
    TS_ASSIGN_OR_RETURN(List items, iterate(*a0));
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) {
      out += (k ? s : "") + to_str(items[k]);
      if (out.size() > kMaxStringBytes) return value_too_large("the result of join()");
    }
    return Value::string(out);
  }
  return NotFound("string has no method '" + name + "'");
}

// Filters over a sequence's items; NotFound when |name| is not one of them.
Result<Value> sequence_filter(const std::string& name, const Value& in, const CallArgs& a) {
  const Value* a0 = a.get(0, "");
  if (name == "first" || name == "last") {
    TS_ASSIGN_OR_RETURN(List items, iterate(in));
    if (items.empty()) return Value{};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    TS_ASSIGN_OR_RETURN(List items, iterate(in));
    std::reverse(items.begin(), items.end());
    if (in.type != Value::Type::kString) return Value::make_list(std::move(items));
    std::string out;
    for (const Value& c : items) out += c.s;
    return Value::string(out);
  }
  if (name == "join") {
    TS_ASSIGN_OR_RETURN(List items, iterate(in));
    const Value* attr = a.get(1, "attribute");
    std::string sep = a0 && a0->type == Value::Type::kString ? a0->s : "", out;
    for (size_t k = 0; k < items.size(); ++k) {
      out += (k ? sep : "") + to_str(attr ? attribute_of(items[k], to_str(*attr)) : items[k]);
      if (out.size() > kMaxStringBytes) return value_too_large("the result of join");
    }
    return Value::string(out);
  }
  if (name == "map") {
    TS_ASSIGN_OR_RETURN(List items, iterate(in));
    const Value* attr = a.get(SIZE_MAX, "attribute");  // keyword only
    List out;
    for (const Value& item : items) {
      if (attr) {
        out.push_back(attribute_of(item, to_str(*attr)));
      } else if (a0 && a0->type == Value::Type::kString) {
        CallArgs rest;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        TS_ASSIGN_OR_RETURN(Value v, apply_filter(a0->s, item, rest));
        out.push_back(std::move(v));
      } else {
        return bad_arg("map", "needs a filter name or attribute=");
      }
    }
    return Value::make_list(std::move(out));
  }
  if (name == "selectattr" || name == "rejectattr") return select_attr(in, a, name == "rejectattr");
  return NotFound(name);
}

}  // namespace

Result<List> iterate(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return List{};  // Jinja's Undefined iterates as empty
    case Value::Type::kList: return *v.list;
    case Value::Type::kDict: {
      List keys;
      for (const auto& [k, _] : *v.dict) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Type::kString: {
      List chars;
      for (uint32_t cp : code_points(v.s)) {
        std::string c;
        utf8_append(c, cp);
        chars.push_back(Value::string(std::move(c)));
      }
      return chars;
    }
    default: return InvalidArgument(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

Result<Value> call_method(const Value& obj, const std::string& name, const CallArgs& a) {
  if (obj.type == Value::Type::kString) return string_method(obj.s, name, a);
  if (obj.type == Value::Type::kDict && !obj.is_namespace) {
    if (name == "items" || name == "keys" || name == "values") {
      List out;
      for (const auto& [k, v] : *obj.dict) {
        if (name == "items") out.push_back(Value::make_list({Value::string(k), v}));
        else out.push_back(name == "keys" ? Value::string(k) : v);
      }
      return Value::make_list(std::move(out));
    }
    if (name == "get") {
      const Value* key = a.get(0, "key");
      if (!key) return bad_arg("get", "needs a key");
      const Value* found = obj.find(to_str(*key));
      if (found) return *found;
      const Value* def = a.get(1, "default");
      return def ? *def : Value::none();
    }
  }
  return NotFound(std::string("'") + type_name(obj) + "' object has no method '" + name + "'");
}

Result<Value> apply_filter(const std::string& name, const Value& in, const CallArgs& a) {
  const Value* a0 = a.get(0, "");
  if (name == "default" || name == "d") {
    const Value* boolean = a.get(1, "boolean");
    const bool use_default = in.is_undefined() || (boolean && truthy(*boolean) && !truthy(in));
    if (!use_default) return in;
    const Value* def = a.get(0, "default_value");
    return def ? *def : Value::string("");
  }
  if (name == "length" || name == "count") {
    if (in.type == Value::Type::kString) return Value::integer(static_cast<int64_t>(utf8_length(in.s)));
    TS_ASSIGN_OR_RETURN(List items, iterate(in));
    return Value::integer(static_cast<int64_t>(items.size()));
  }
  if (name == "tojson") {
    const Value* indent = a.get(0, "indent");
    TS_ASSIGN_OR_RETURN(std::string json, to_json(in, indent && indent->type == Value::Type::kInt ? static_cast<int>(indent->i) : -1));
    return Value::string(std::move(json));
  }
  if (name == "safe" || name == "e" || name == "escape") return in;  // autoescape is off
  if (name == "string") return Value::string(to_str(in));
  if (name == "list") {
    TS_ASSIGN_OR_RETURN(List items, iterate(in));
    return Value::make_list(std::move(items));
  }
  if (name == "items") return call_method(in, "items", {});
  auto seq = sequence_filter(name, in, a);
  if (seq.ok() || seq.status().code() != StatusCode::kNotFound) return seq;
  if (name == "int") {
    if (in.type == Value::Type::kInt) return in;
    if (in.type == Value::Type::kFloat) return Value::integer(static_cast<int64_t>(in.f));
    if (in.type == Value::Type::kBool) return Value::integer(in.b);
    try { return Value::integer(std::stoll(in.s)); } catch (...) { return a0 ? *a0 : Value::integer(0); }
  }
  if (name == "float") {
    if (in.is_number()) return Value::number(in.as_double());
    try { return Value::number(std::stod(in.s)); } catch (...) { return a0 ? *a0 : Value::number(0); }
  }
  if (name == "abs") {
    if (in.type == Value::Type::kInt && in.i == std::numeric_limits<int64_t>::min())
      return InvalidArgument("integer overflow: abs(" + std::to_string(in.i) + ") does not fit in 64 bits");
    if (in.type == Value::Type::kInt) return Value::integer(in.i < 0 ? -in.i : in.i);
    if (in.type == Value::Type::kFloat) return Value::number(in.f < 0 ? -in.f : in.f);
  }
  if (name == "indent") {
    const Value* width = a.get(0, "width");
    const Value* first = a.get(1, "first");
    const int64_t n = width && width->type == Value::Type::kInt ? width->i : 4;
    if (n < 0 || size_t(n) > kMaxStringBytes) return bad_arg("indent", "width " + std::to_string(n) + " out of range");
    const std::string pad(static_cast<size_t>(n), ' ');
    const std::string s = to_str(in);
    std::string out = first && truthy(*first) && !s.empty() ? pad : "";
    for (size_t k = 0; k < s.size(); ++k) {
      out += s[k];
      if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') out += pad;
      if (out.size() > kMaxStringBytes) return value_too_large("the result of indent");
    }
    return Value::string(out);
  }
  if (in.type == Value::Type::kString) {
    if (name == "trim") return Value::string(py_strip(in.s, a0, true, true));
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize")
      return string_method(in.s, name, {});
    if (name == "replace") return string_method(in.s, name, a);
  }
  return InvalidArgument("no filter '" + name + "' for a value of type " + type_name(in));
}

Result<bool> apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  const Value* a0 = a.get(0, "");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.type == Value::Type::kNone;
  if (name == "string") return v.type == Value::Type::kString;
  if (name == "number") return v.type == Value::Type::kInt || v.type == Value::Type::kFloat;
  if (name == "integer") return v.type == Value::Type::kInt;
  if (name == "float") return v.type == Value::Type::kFloat;
  if (name == "boolean") return v.type == Value::Type::kBool;
  if (name == "true") return v.type == Value::Type::kBool && v.b;
  if (name == "false") return v.type == Value::Type::kBool && !v.b;
  if (name == "mapping") return v.type == Value::Type::kDict;
  if (name == "sequence" || name == "iterable")
    return v.type == Value::Type::kList || v.type == Value::Type::kDict || v.type == Value::Type::kString;
  if (name == "callable") return false;
  if (name == "lower" || name == "upper")
    return v.type == Value::Type::kString && v.s == ascii_case(v.s, name == "upper");
  if (name == "even" || name == "odd") {
    if (v.type != Value::Type::kInt) return bad_arg(name, "needs an integer");
    return (v.i % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    if (v.type != Value::Type::kInt || !a0 || a0->type != Value::Type::kInt || a0->i == 0)
      return bad_arg(name, "needs integers");
    return v.i % a0->i == 0;
  }
  if (name == "equalto" || name == "eq" || name == "sameas" || name == "==") return a0 && equal(v, *a0);
  if (name == "ne" || name == "!=") return !a0 || !equal(v, *a0);
  if (name == "in") {
    if (!a0) return bad_arg("in", "needs a container");
    if (a0->type == Value::Type::kString) return v.type == Value::Type::kString && a0->s.find(v.s) != std::string::npos;
    TS_ASSIGN_OR_RETURN(List items, iterate(*a0));
    return std::any_of(items.begin(), items.end(), [&](const Value& x) { return equal(x, v); });
  }
  return InvalidArgument("no test named '" + name + "'");
}

Result<Value> call_global(const std::string& name, const CallArgs& a) {
  if (name == "namespace" || name == "dict") {
    Value ns = Value::make_dict();
    ns.is_namespace = name == "namespace";
    for (const Value& p : a.pos) {  // a dict argument seeds the attributes
      if (p.type == Value::Type::kDict) for (const auto& [k, v] : *p.dict) ns.set(k, v);
    }
    for (const auto& [k, v] : a.kw) ns.set(k, v);
    return ns;
  }
  if (name == "range") {
    int64_t start = 0, stop = 0, step = 1;
    for (const Value& p : a.pos) if (p.type != Value::Type::kInt) return bad_arg("range", "needs integers");
    if (a.pos.size() == 1) stop = a.pos[0].i;
    else if (a.pos.size() >= 2) { start = a.pos[0].i; stop = a.pos[1].i; }
    if (a.pos.size() == 3) step = a.pos[2].i;
    if (a.pos.empty() || a.pos.size() > 3 || step == 0) return bad_arg("range", "bad arguments");
    // Counted in 128 bits: stop - start and the last k + step can overflow int64.
    const __int128 span = step > 0 ? __int128(stop) - start : __int128(start) - stop;
    const __int128 count = span <= 0 ? 0 : (span + (step > 0 ? step : -__int128(step)) - 1) / (step > 0 ? step : -__int128(step));
    if (count > 100000) return bad_arg("range", "more than 100000 items");
    List out;
    for (int64_t k = 0; k < int64_t(count); ++k) out.push_back(Value::integer(int64_t(start + __int128(k) * step)));
    return Value::make_list(std::move(out));
  }
  if (name == "strftime_now") {
    const Value* fmt = a.get(0, "format");
    if (!fmt || fmt->type != Value::Type::kString) return bad_arg("strftime_now", "needs a format string");
    // SOURCE_DATE_EPOCH (the reproducible-builds convention: seconds since 1970, read as UTC)
    // pins the clock, so a template that prints today's date (gpt-oss's harmony system message)
    // renders the same text every day in tests.
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    const char* pinned = std::getenv("SOURCE_DATE_EPOCH");
    char* end = nullptr;
    const long long epoch = pinned ? std::strtoll(pinned, &end, 10) : 0;
    if (pinned && *pinned && end && *end == '\0' && epoch >= 0) {
      now = std::time_t(epoch);
      gmtime_r(&now, &tm);
    } else {
      localtime_r(&now, &tm);
    }
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), fmt->s.c_str(), &tm);
    return Value::string(std::string(buf, n));
  }
  return NotFound("'" + name + "' is undefined");
}

}  // namespace tessera::jinja

// Values with Python's semantics: str()/repr() spellings, truthiness, equality, JSON.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "models/chat_template/jinja.h"
#include "models/tokenizer/unicode.h"

namespace tessera::jinja {

const Value* Value::find(std::string_view key) const {
  if (type != Type::kDict) return nullptr;
  for (const auto& [k, v] : *dict) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *dict) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  dict->emplace_back(key, std::move(v));
}

Status value_too_large(const std::string& what) {
  return ResourceExhausted(what + " exceeds the chat template limits (" + std::to_string(kMaxStringBytes) +
                           " bytes per string, " + std::to_string(kMaxListItems) + " items per list)");
}

bool truthy(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return false;
    case Value::Type::kBool: return v.b;
    case Value::Type::kInt: return v.i != 0;
    case Value::Type::kFloat: return v.f != 0;
    case Value::Type::kString: return !v.s.empty();
    case Value::Type::kList: return !v.list->empty();
    case Value::Type::kDict: return v.is_namespace || !v.dict->empty();
  }
  return false;
}

const char* type_name(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return "undefined";
    case Value::Type::kNone: return "none";
    case Value::Type::kBool: return "bool";
    case Value::Type::kInt: return "int";
    case Value::Type::kFloat: return "float";
    case Value::Type::kString: return "string";
    case Value::Type::kList: return "list";
    case Value::Type::kDict: return v.is_namespace ? "namespace" : "dict";
  }
  return "?";
}

namespace {

// Python's repr(float): the shortest digits that round-trip, fixed notation for decimal
// exponents in [-4, 16), else d.ddde+XX.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[40];
  for (int prec = 0; prec < 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*e", prec, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s(buf);
  const size_t e = s.find('e');
  const int exp = std::atoi(s.c_str() + e + 1);
  std::string sign = s[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t k = sign.size(); k < e; ++k) if (s[k] != '.') digits += s[k];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
    return sign + out;
  }
  std::string mant = digits.substr(0, 1);
  if (digits.size() > 1) mant += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mant + ebuf;
}

std::string string_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == q) {
          out += '\\';
          out += c;
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\x%02x", static_cast<unsigned char>(c));
          out += b;
        } else {
          out += c;
        }
    }
  }
  return out + q;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", static_cast<unsigned char>(c));
          out += b;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

Status json_value(const Value& v, int indent, int depth, std::string& out) {
  const std::string nl = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * (depth + 1)), ' ') : "";
  const std::string nl_end = indent >= 0 ? "\n" + std::string(static_cast<size_t>(indent * depth), ' ') : "";
  const char* sep = indent >= 0 ? "," : ", ";
  switch (v.type) {
    case Value::Type::kUndefined: return InvalidArgument("tojson: value is undefined");
    case Value::Type::kNone: out += "null"; return OkStatus();
    case Value::Type::kBool: out += v.b ? "true" : "false"; return OkStatus();
    case Value::Type::kInt: out += std::to_string(v.i); return OkStatus();
    case Value::Type::kFloat:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity") : float_repr(v.f);
      return OkStatus();
    case Value::Type::kString: json_string(v.s, out); return OkStatus();
    case Value::Type::kList:
      if (v.list->empty()) { out += "[]"; return OkStatus(); }
      out += "[";
      for (size_t k = 0; k < v.list->size(); ++k) {
        out += k ? sep + nl : nl;
        TS_RETURN_IF_ERROR(json_value((*v.list)[k], indent, depth + 1, out));
      }
      out += nl_end + "]";
      return OkStatus();
    case Value::Type::kDict:
      if (v.dict->empty()) { out += "{}"; return OkStatus(); }
      out += "{";
      for (size_t k = 0; k < v.dict->size(); ++k) {
        out += k ? sep + nl : nl;
        json_string((*v.dict)[k].first, out);
        out += ": ";
        TS_RETURN_IF_ERROR(json_value((*v.dict)[k].second, indent, depth + 1, out));
      }
      out += nl_end + "}";
      return OkStatus();
  }
  return OkStatus();
}

}  // namespace

std::string repr(const Value& v) {
  if (v.type == Value::Type::kString) return string_repr(v.s);
  return to_str(v);
}

std::string to_str(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined: return "";
    case Value::Type::kNone: return "None";
    case Value::Type::kBool: return v.b ? "True" : "False";
    case Value::Type::kInt: return std::to_string(v.i);
    case Value::Type::kFloat: return float_repr(v.f);
    case Value::Type::kString: return v.s;
    case Value::Type::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
      return out + "]";
    }
    case Value::Type::kDict: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t k = 0; k < v.dict->size(); ++k)
        out += (k ? ", " : "") + string_repr((*v.dict)[k].first) + ": " + repr((*v.dict)[k].second);
      return out + "}";
    }
  }
  return "";
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type != Value::Type::kFloat && b.type != Value::Type::kFloat)
      return (a.type == Value::Type::kBool ? a.b : a.i) == (b.type == Value::Type::kBool ? b.b : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::kString: return a.s == b.s;
    case Value::Type::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Type::kDict:
      if (a.dict == b.dict) return true;
      if (a.dict->size() != b.dict->size()) return false;
      for (const auto& [k, v] : *a.dict) {
        const Value* o = b.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    default: return true;  // undefined == undefined, none == none
  }
}

Result<std::string> to_json(const Value& v, int indent) {
  std::string out;
  TS_RETURN_IF_ERROR(json_value(v, indent, 0, out));
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0, pos = 0;
  while (pos < s.size()) {
    utf8_next(s, pos);
    ++n;
  }
  return n;
}

bool py_isspace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

}  // namespace tessera::jinja

// Binary operators with Python's rules (int/float promotion, floor division and modulo
// rounding toward negative infinity, string and list concatenation and repetition).
#include <cmath>

#include "models/chat_template/jinja.h"

namespace tessera::jinja {
namespace {

Status unsupported(const std::string& op, const Value& l, const Value& r) {
  return InvalidArgument("unsupported operand types for " + op + ": '" + type_name(l) + "' and '" +
                         type_name(r) + "'");
}

int64_t int_of(const Value& v) { return v.type == Value::Type::kBool ? v.b : v.i; }
bool both_int(const Value& l, const Value& r) {
  return l.is_number() && r.is_number() && l.type != Value::Type::kFloat && r.type != Value::Type::kFloat;
}

Status overflow(const std::string& op, int64_t a, int64_t b) {
  return InvalidArgument("integer overflow: " + std::to_string(a) + " " + op + " " + std::to_string(b) +
                         " does not fit in 64 bits");
}

// a ** b (b >= 0) by squaring, with every product checked.
Result<Value> int_power(int64_t a, int64_t b) {
  int64_t out = 1, base = a;
  for (int64_t e = b; e > 0; e >>= 1) {
    if ((e & 1) && __builtin_mul_overflow(out, base, &out)) return overflow("**", a, b);
    if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow("**", a, b);
  }
  return Value::integer(out);
}

Result<Value> repeat(const Value& seq, int64_t n) {
  if (n > 100000) return InvalidArgument("repetition count " + std::to_string(n) + " too large");
  const size_t unit = seq.type == Value::Type::kString ? seq.s.size() : seq.list->size();
  const size_t limit = seq.type == Value::Type::kString ? kMaxStringBytes : kMaxListItems;
  if (n > 0 && unit > limit / size_t(n)) return value_too_large("repetition of " + std::to_string(unit) + " x " + std::to_string(n));
  if (seq.type == Value::Type::kString) {
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::make_list(std::move(out));
}

Result<Value> arithmetic(const std::string& op, const Value& l, const Value& r) {
  if (!l.is_number() || !r.is_number()) return unsupported(op, l, r);
  if (both_int(l, r)) {
    const int64_t a = int_of(l), b = int_of(r);
    int64_t out = 0;
    if (op == "-") return __builtin_sub_overflow(a, b, &out) ? Result<Value>(overflow(op, a, b)) : Value::integer(out);
    if (op == "*") return __builtin_mul_overflow(a, b, &out) ? Result<Value>(overflow(op, a, b)) : Value::integer(out);
    if (op == "**" && b >= 0) return int_power(a, b);
    if (op == "//" || op == "%") {
      if (b == 0) return InvalidArgument("integer division or modulo by zero");
      if (b == -1) {  // a / -1 overflows for the most negative a (and traps on x86)
        if (op == "%") return Value::integer(0);
        return __builtin_sub_overflow(int64_t{0}, a, &out) ? Result<Value>(overflow(op, a, b)) : Value::integer(out);
      }
      int64_t q = a / b, m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) { --q; m += b; }
      return Value::integer(op == "//" ? q : m);
    }
  }
  const double a = l.as_double(), b = r.as_double();
  if (op == "-") return Value::number(a - b);
  if (op == "*") return Value::number(a * b);
  if (op == "**") return Value::number(std::pow(a, b));
  if (b == 0) return InvalidArgument("division by zero");
  if (op == "/") return Value::number(a / b);
  if (op == "//") return Value::number(std::floor(a / b));
  if (op == "%") {
    double m = std::fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return Value::number(m);
  }
  return unsupported(op, l, r);
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.type) {
    case Value::Type::kString:
      if (item.type != Value::Type::kString) return unsupported("in", item, container);
      return container.s.find(item.s) != std::string::npos;
    case Value::Type::kList:
      for (const Value& v : *container.list) if (equal(v, item)) return true;
      return false;
    case Value::Type::kDict: return container.find(to_str(item)) != nullptr;
    case Value::Type::kUndefined: return false;
    default: return unsupported("in", item, container);
  }
}

}  // namespace

Result<Value> binary_op(const std::string& op, const Value& l, const Value& r) {
  if (op == "==") return Value::boolean(equal(l, r));
  if (op == "!=") return Value::boolean(!equal(l, r));
  if (op == "~") return Value::string(to_str(l) + to_str(r));
  if (op == "in" || op == "not in") {
    TS_ASSIGN_OR_RETURN(bool found, contains(r, l));
    return Value::boolean(found == (op == "in"));
  }
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    int cmp = 0;
    if (l.is_number() && r.is_number()) {
      const double a = l.as_double(), b = r.as_double();
      cmp = both_int(l, r) ? (int_of(l) < int_of(r) ? -1 : int_of(l) > int_of(r)) : (a < b ? -1 : a > b);
    } else if (l.type == Value::Type::kString && r.type == Value::Type::kString) {
      cmp = l.s.compare(r.s);  // UTF-8 byte order is code point order, as Python compares
    } else {
      return unsupported(op, l, r);
    }
    if (op == "<") return Value::boolean(cmp < 0);
    if (op == "<=") return Value::boolean(cmp <= 0);
    if (op == ">") return Value::boolean(cmp > 0);
    return Value::boolean(cmp >= 0);
  }
  if (op == "+") {
    if (l.type == Value::Type::kString && r.type == Value::Type::kString) return Value::string(l.s + r.s);
    if (l.type == Value::Type::kList && r.type == Value::Type::kList) {
      List out = *l.list;
      out.insert(out.end(), r.list->begin(), r.list->end());
      return Value::make_list(std::move(out));
    }
    if (!l.is_number() || !r.is_number()) return unsupported(op, l, r);
    if (both_int(l, r)) {
      int64_t out = 0;
      if (__builtin_add_overflow(int_of(l), int_of(r), &out)) return overflow(op, int_of(l), int_of(r));
      return Value::integer(out);
    }
    return Value::number(l.as_double() + r.as_double());
  }
  if (op == "*") {
    const bool seq_l = l.type == Value::Type::kString || l.type == Value::Type::kList;
    const bool seq_r = r.type == Value::Type::kString || r.type == Value::Type::kList;
    if (seq_l && r.type == Value::Type::kInt) return repeat(l, r.i);
    if (seq_r && l.type == Value::Type::kInt) return repeat(r, l.i);
  }
  return arithmetic(op, l, r);
}

}  // namespace tessera::jinja

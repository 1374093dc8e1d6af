// GGUF metadata values and the File's lookups and typed getters.
#include <limits>

#include "models/gguf/gguf.h"

namespace tessera::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "unknown";
}

namespace {
bool is_unsigned(ValueType t) {
  return t == ValueType::kU8 || t == ValueType::kU16 || t == ValueType::kU32 ||
         t == ValueType::kU64;
}
bool is_signed(ValueType t) {
  return t == ValueType::kI8 || t == ValueType::kI16 || t == ValueType::kI32 ||
         t == ValueType::kI64;
}
// "u32" or "array of string": what a mistyped key actually holds.
std::string describe(const Value& v) {
  if (v.type != ValueType::kArray) return value_type_name(v.type);
  return std::string("array of ") + value_type_name(v.array_type);
}
}  // namespace

Value Value::of_uint(ValueType t, uint64_t v) {
  Value r;
  r.type = t;
  r.u = v;
  return r;
}
Value Value::of_int(ValueType t, int64_t v) {
  Value r;
  r.type = t;
  r.i = v;
  return r;
}
Value Value::of_float(ValueType t, double v) {
  Value r;
  r.type = t;
  r.f = v;
  return r;
}
Value Value::of_bool(bool v) {
  Value r;
  r.type = ValueType::kBool;
  r.b = v;
  return r;
}
Value Value::of_string(std::string v) {
  Value r;
  r.type = ValueType::kString;
  r.s = std::move(v);
  return r;
}
Value Value::of_array(ValueType elem, std::vector<Value> elems) {
  Value r;
  r.type = ValueType::kArray;
  r.array_type = elem;
  r.array = std::move(elems);
  return r;
}

bool Value::is_integer() const { return is_unsigned(type) || is_signed(type); }

bool Value::operator==(const Value& o) const {
  if (type != o.type) return false;
  if (is_unsigned(type)) return u == o.u;
  if (is_signed(type)) return i == o.i;
  switch (type) {
    case ValueType::kF32: case ValueType::kF64: return f == o.f;
    case ValueType::kBool: return b == o.b;
    case ValueType::kString: return s == o.s;
    case ValueType::kArray: return array_type == o.array_type && array == o.array;
    default: return false;
  }
}

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : metadata_)
    if (k == key) return &v;
  return nullptr;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

Result<const Value*> File::lookup(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return NotFound(path_ + ": key '" + std::string(key) + "' not found");
  return v;
}

namespace {
Status mistyped(const std::string& path, std::string_view key, const Value& v,
                std::string_view wanted) {
  return InvalidArgument(path + ": key '" + std::string(key) + "' is " + describe(v) +
                         ", expected " + std::string(wanted));
}

// An integer value as int64, range-checked for u64.
Result<int64_t> as_int(const Value& v, const std::string& what) {
  if (is_signed(v.type)) return v.i;
  if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return OutOfRange(what + ": value " + std::to_string(v.u) + " does not fit in int64");
  return static_cast<int64_t>(v.u);
}
double as_double(const Value& v) {
  if (v.is_float()) return v.f;
  if (is_signed(v.type)) return static_cast<double>(v.i);
  return static_cast<double>(v.u);
}
}  // namespace

Result<std::string> File::get_string(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const Value* v, lookup(key));
  if (v->type != ValueType::kString) return mistyped(path_, key, *v, "string");
  return v->s;
}

Result<int64_t> File::get_int(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const Value* v, lookup(key));
  if (!v->is_integer()) return mistyped(path_, key, *v, "an integer");
  return as_int(*v, path_ + ": key '" + std::string(key) + "'");
}

Result<double> File::get_float(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const Value* v, lookup(key));
  if (!v->is_float() && !v->is_integer()) return mistyped(path_, key, *v, "a number");
  return as_double(*v);
}

Result<bool> File::get_bool(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const Value* v, lookup(key));
  if (v->type != ValueType::kBool) return mistyped(path_, key, *v, "bool");
  return v->b;
}

Result<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const Value* v, lookup(key));
  if (v->type != ValueType::kArray || v->array_type != ValueType::kString)
    return mistyped(path_, key, *v, "array of string");
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const auto& e : v->array) out.push_back(e.s);
  return out;
}

Result<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const Value* v, lookup(key));
  if (v->type != ValueType::kArray || !(is_signed(v->array_type) || is_unsigned(v->array_type)))
    return mistyped(path_, key, *v, "array of integers");
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (size_t k = 0; k < v->array.size(); ++k) {
    TS_ASSIGN_OR_RETURN(int64_t x, as_int(v->array[k], path_ + ": key '" + std::string(key) +
                                                           "'[" + std::to_string(k) + "]"));
    out.push_back(x);
  }
  return out;
}

Result<std::vector<double>> File::get_float_array(std::string_view key) const {
  TS_ASSIGN_OR_RETURN(const Value* v, lookup(key));
  const ValueType e = v->array_type;
  if (v->type != ValueType::kArray ||
      !(e == ValueType::kF32 || e == ValueType::kF64 || is_signed(e) || is_unsigned(e)))
    return mistyped(path_, key, *v, "array of numbers");
  std::vector<double> out;
  out.reserve(v->array.size());
  for (const auto& x : v->array) out.push_back(as_double(x));
  return out;
}

}  // namespace tessera::gguf

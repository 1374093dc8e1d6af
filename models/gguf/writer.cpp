// GGUF v3 writer: metadata and tensors are collected in memory, then laid out in one pass.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "models/gguf/gguf.h"

namespace tessera::gguf {

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::vector<uint8_t>& out) : out_(out) {}
  template <class T>
  void put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void pad_to(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }

 private:
  std::vector<uint8_t>& out_;
};

// Writes |v|'s payload (no type tag), checking that arrays are homogeneous and not too deep.
Status put_payload(ByteSink& sink, const Value& v, const std::string& what, int depth) {
  switch (v.type) {
    case ValueType::kU8: sink.put<uint8_t>(static_cast<uint8_t>(v.u)); return OkStatus();
    case ValueType::kU16: sink.put<uint16_t>(static_cast<uint16_t>(v.u)); return OkStatus();
    case ValueType::kU32: sink.put<uint32_t>(static_cast<uint32_t>(v.u)); return OkStatus();
    case ValueType::kU64: sink.put<uint64_t>(v.u); return OkStatus();
    case ValueType::kI8: sink.put<int8_t>(static_cast<int8_t>(v.i)); return OkStatus();
    case ValueType::kI16: sink.put<int16_t>(static_cast<int16_t>(v.i)); return OkStatus();
    case ValueType::kI32: sink.put<int32_t>(static_cast<int32_t>(v.i)); return OkStatus();
    case ValueType::kI64: sink.put<int64_t>(v.i); return OkStatus();
    case ValueType::kF32: sink.put<float>(static_cast<float>(v.f)); return OkStatus();
    case ValueType::kF64: sink.put<double>(v.f); return OkStatus();
    case ValueType::kBool: sink.put<uint8_t>(v.b ? 1 : 0); return OkStatus();
    case ValueType::kString: sink.put_string(v.s); return OkStatus();
    case ValueType::kArray: {
      if (depth + 1 > kMaxNestingDepth)
        return InvalidArgument(what + ": arrays nested deeper than " +
                               std::to_string(kMaxNestingDepth));
      sink.put<uint32_t>(static_cast<uint32_t>(v.array_type));
      sink.put<uint64_t>(v.array.size());
      for (size_t k = 0; k < v.array.size(); ++k) {
        const std::string elem = what + "[" + std::to_string(k) + "]";
        if (v.array[k].type != v.array_type)
          return InvalidArgument(elem + " is " + value_type_name(v.array[k].type) +
                                 " in an array of " + value_type_name(v.array_type));
        TS_RETURN_IF_ERROR(put_payload(sink, v.array[k], elem, depth + 1));
      }
      return OkStatus();
    }
  }
  return InvalidArgument(what + ": unknown value type " +
                         std::to_string(static_cast<uint32_t>(v.type)));
}

}  // namespace

void Writer::set_alignment(uint32_t a) {
  alignment_ = a;
  add_u32("general.alignment", a);
}

void Writer::add(std::string key, Value v) {
  for (auto& [k, old] : metadata_) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(v));
}

void Writer::add_string(std::string key, std::string v) {
  add(std::move(key), Value::of_string(std::move(v)));
}
void Writer::add_u32(std::string key, uint32_t v) {
  add(std::move(key), Value::of_uint(ValueType::kU32, v));
}
void Writer::add_i32(std::string key, int32_t v) {
  add(std::move(key), Value::of_int(ValueType::kI32, v));
}
void Writer::add_f32(std::string key, float v) {
  add(std::move(key), Value::of_float(ValueType::kF32, v));
}
void Writer::add_bool(std::string key, bool v) { add(std::move(key), Value::of_bool(v)); }
void Writer::add_u64(std::string key, uint64_t v) {
  add(std::move(key), Value::of_uint(ValueType::kU64, v));
}
void Writer::add_string_array(std::string key, std::vector<std::string> v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (auto& s : v) elems.push_back(Value::of_string(std::move(s)));
  add(std::move(key), Value::of_array(ValueType::kString, std::move(elems)));
}
void Writer::add_i32_array(std::string key, std::vector<int32_t> v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (int32_t x : v) elems.push_back(Value::of_int(ValueType::kI32, x));
  add(std::move(key), Value::of_array(ValueType::kI32, std::move(elems)));
}
void Writer::add_f32_array(std::string key, std::vector<float> v) {
  std::vector<Value> elems;
  elems.reserve(v.size());
  for (float x : v) elems.push_back(Value::of_float(ValueType::kF32, x));
  add(std::move(key), Value::of_array(ValueType::kF32, std::move(elems)));
}

Status Writer::add_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                          const void* data, size_t nbytes) {
  const std::string what = "gguf writer: tensor '" + name + "'";
  if (name.empty()) return InvalidArgument("gguf writer: empty tensor name");
  for (const auto& t : tensors_)
    if (t.name == name) return InvalidArgument(what + ": duplicate tensor name");
  if (shape.empty() || shape.size() > 4)
    return InvalidArgument(what + ": rank " + std::to_string(shape.size()) + " is outside 1..4");
  int64_t rows = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 1)
      return InvalidArgument(what + ": dimension " + std::to_string(d) + " is " +
                             std::to_string(shape[d]));
    if (d + 1 < shape.size()) rows *= shape[d];
  }
  if (dtype_traits(dtype).gguf_type < 0)
    return InvalidArgument(what + ": dtype " + dtype_name(dtype) + " has no GGUF type");
  std::string row_err = dtype_row_check(dtype, shape.back());
  if (!row_err.empty()) return InvalidArgument(what + ": " + row_err);
  const uint64_t want = static_cast<uint64_t>(dtype_row_bytes(dtype, shape.back())) *
                        static_cast<uint64_t>(rows);
  if (nbytes != want)
    return InvalidArgument(what + ": got " + std::to_string(nbytes) + " bytes, shape needs " +
                           std::to_string(want));
  const auto* p = static_cast<const uint8_t*>(data);
  tensors_.push_back({std::move(name), dtype, std::move(shape), std::vector<uint8_t>(p, p + nbytes)});
  return OkStatus();
}

Result<std::vector<uint8_t>> Writer::serialize() const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0 || alignment_ > kMaxAlignment)
    return InvalidArgument("gguf writer: alignment " + std::to_string(alignment_) +
                           " is not a power of two <= " + std::to_string(kMaxAlignment));
  std::vector<uint8_t> out;
  ByteSink sink(out);
  sink.put<uint32_t>(0x46554747);  // "GGUF"
  sink.put<uint32_t>(3);
  sink.put<uint64_t>(tensors_.size());
  sink.put<uint64_t>(metadata_.size());
  for (const auto& [key, v] : metadata_) {
    sink.put_string(key);
    sink.put<uint32_t>(static_cast<uint32_t>(v.type));
    TS_RETURN_IF_ERROR(put_payload(sink, v, "gguf writer: key '" + key + "'", 0));
  }
  uint64_t rel = 0;
  for (const auto& t : tensors_) {
    sink.put_string(t.name);
    sink.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) sink.put<int64_t>(*it);
    sink.put<uint32_t>(static_cast<uint32_t>(dtype_traits(t.dtype).gguf_type));
    sink.put<uint64_t>(rel);
    rel = (rel + t.data.size() + alignment_ - 1) / alignment_ * alignment_;
  }
  sink.pad_to(alignment_);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    sink.pad_to(alignment_);
  }
  return out;
}

Status Writer::write(const std::string& path) const {
  TS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, serialize());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return Unavailable(path + ": cannot create: " + std::strerror(errno));
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int err = errno;
  if (std::fclose(f) != 0 || n != bytes.size())
    return Unavailable(path + ": write failed: " + std::strerror(err));
  return OkStatus();
}

}  // namespace tessera::gguf

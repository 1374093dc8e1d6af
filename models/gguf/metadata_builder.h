// MetadataBuilder: GGUF metadata appended in insertion order, with one call per value type (the
// converters' and the architectures' add_gguf_config use it to write {arch}.* keys).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "models/gguf/gguf.h"

namespace tessera::gguf {

class MetadataBuilder {
 public:
  using List = std::vector<std::pair<std::string, Value>>;
  void str(std::string k, std::string v) { list_.emplace_back(std::move(k), Value::of_string(std::move(v))); }
  void u32(std::string k, int64_t v) { list_.emplace_back(std::move(k), Value::of_uint(ValueType::kU32, uint64_t(v))); }
  void f32(std::string k, double v) { list_.emplace_back(std::move(k), Value::of_float(ValueType::kF32, v)); }
  void flag(std::string k, bool v) { list_.emplace_back(std::move(k), Value::of_bool(v)); }
  template <class T, class F>
  void array(std::string k, ValueType t, const std::vector<T>& v, F make) {
    std::vector<Value> vals;
    vals.reserve(v.size());
    for (const T& x : v) vals.push_back(make(x));
    list_.emplace_back(std::move(k), Value::of_array(t, std::move(vals)));
  }
  List& list() { return list_; }

 private:
  List list_;
};

}  // namespace tessera::gguf

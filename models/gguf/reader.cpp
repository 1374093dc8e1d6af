// GGUF reader: maps the file, then validates every byte it will later hand out. Parsing never
// trusts a count or length before checking it against both a fixed limit and the bytes left, so
// a hostile file cannot make us allocate more than a small multiple of its own size.

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "models/gguf/gguf.h"
#include "models/mapped_file.h"

namespace tessera::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32

// Names of ggml types Tessera does not load, so "unsupported tensor type 12 (q4_K)" says what
// the file holds. Indexed by ggml type id.
const char* ggml_type_name(uint32_t id) {
  static const char* const kNames[] = {
      "f32",  "f16",  "q4_0", "q4_1", "q4_2", "q4_3", "q5_0",    "q5_1",   "q8_0",   "q8_1",
      "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q8_K", "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
      "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8", "i16", "i32", "i64", "f64", "iq1_m", "bf16",
      "q4_0_4_4", "q4_0_4_8", "q4_0_8_8", "tq1_0", "tq2_0", "iq4_nl_4_4", "iq4_nl_4_8",
      "iq4_nl_8_8", "mxfp4"};
  return id < std::size(kNames) ? kNames[id] : "unknown";
}

// Bytes one element of |t| needs at least; bounds an array count by the bytes left.
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kBool: return 1;
    case ValueType::kU16: case ValueType::kI16: return 2;
    case ValueType::kU32: case ValueType::kI32: case ValueType::kF32: return 4;
    case ValueType::kU64: case ValueType::kI64: case ValueType::kF64: case ValueType::kString: return 8;
    case ValueType::kArray: return 12;  // element type + count
  }
  return 1;
}

}  // namespace

// Reads the header, metadata and tensor infos of one file into a File. Errors are prefixed with
// the path by the caller; here they name the field and the byte offset.
class Parser {
 public:
  Parser(const uint8_t* data, size_t size, File& out) : p_(data), size_(size), out_(out) {}

  Status run() {
    TS_RETURN_IF_ERROR(parse_header());
    TS_RETURN_IF_ERROR(parse_metadata());
    TS_RETURN_IF_ERROR(read_alignment());
    TS_RETURN_IF_ERROR(parse_tensor_infos());
    return place_tensors();
  }

 private:
  size_t left() const { return size_ - pos_; }

  Status need(uint64_t n, const std::string& what) {
    if (n <= left()) return OkStatus();
    return DataLoss("truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " +
                    std::to_string(pos_) + ", only " + std::to_string(left()) + " left");
  }
  template <class T>
  Status read(T& v, const std::string& what) {
    TS_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }
  Status read_string(std::string& s, const std::string& what) {
    uint64_t len = 0;
    TS_RETURN_IF_ERROR(read(len, what + " length"));
    if (len >= kMaxStringBytes)
      return DataLoss(what + ": string length " + std::to_string(len) + " exceeds the limit of " +
                      std::to_string(kMaxStringBytes) + " bytes");
    TS_RETURN_IF_ERROR(need(len, what + " (string of length " + std::to_string(len) + ")"));
    s.assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return OkStatus();
  }

  Status parse_header() {
    uint32_t magic = 0;
    TS_RETURN_IF_ERROR(read(magic, "magic"));
    if (magic != kMagic) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%08x", magic);
      return DataLoss(std::string("bad magic ") + hex + ": not a GGUF file (expected \"GGUF\")");
    }
    TS_RETURN_IF_ERROR(read(out_.version_, "version"));
    if (out_.version_ == 0x03000000 || out_.version_ == 0x02000000)
      return Unimplemented("big-endian GGUF files are not supported");
    if (out_.version_ != 2 && out_.version_ != 3)
      return Unimplemented("unsupported GGUF version " + std::to_string(out_.version_) +
                           " (supported: 2, 3)");
    TS_RETURN_IF_ERROR(read(n_tensors_, "tensor_count"));
    TS_RETURN_IF_ERROR(read(n_keys_, "kv_count"));
    if (n_tensors_ >= kMaxTensors)
      return DataLoss("tensor_count " + std::to_string(n_tensors_) + " exceeds the limit of " +
                      std::to_string(kMaxTensors));
    if (n_keys_ >= kMaxKeys)
      return DataLoss("kv_count " + std::to_string(n_keys_) + " exceeds the limit of " +
                      std::to_string(kMaxKeys));
    return OkStatus();
  }

  Status parse_metadata() {
    std::unordered_set<std::string> seen;
    out_.metadata_.reserve(std::min<uint64_t>(n_keys_, left() / 13));
    for (uint64_t k = 0; k < n_keys_; ++k) {
      std::string key;
      TS_RETURN_IF_ERROR(read_string(key, "key #" + std::to_string(k)));
      if (!seen.insert(key).second) return DataLoss("duplicate key '" + key + "'");
      Value v;
      TS_RETURN_IF_ERROR(read_value(v, "key '" + key + "'", 0));
      out_.metadata_.emplace_back(std::move(key), std::move(v));
    }
    return OkStatus();
  }

  Status read_type(ValueType& t, const std::string& what) {
    uint32_t raw = 0;
    TS_RETURN_IF_ERROR(read(raw, what + " type"));
    if (raw >= kNumValueTypes)
      return DataLoss(what + ": unknown value type " + std::to_string(raw));
    t = static_cast<ValueType>(raw);
    return OkStatus();
  }

  Status read_value(Value& v, const std::string& what, int depth) {
    TS_RETURN_IF_ERROR(read_type(v.type, what));
    return read_payload(v, what, depth);
  }

  // The value's bytes after its type tag (array elements carry no tag of their own).
  Status read_payload(Value& v, const std::string& what, int depth) {
    if (++n_values_ > kMaxTotalValues)
      return DataLoss(what + ": more than " + std::to_string(kMaxTotalValues) +
                      " metadata values in the file");
    switch (v.type) {
      case ValueType::kU8: return read_uint<uint8_t>(v, what);
      case ValueType::kU16: return read_uint<uint16_t>(v, what);
      case ValueType::kU32: return read_uint<uint32_t>(v, what);
      case ValueType::kU64: return read_uint<uint64_t>(v, what);
      case ValueType::kI8: return read_int<int8_t>(v, what);
      case ValueType::kI16: return read_int<int16_t>(v, what);
      case ValueType::kI32: return read_int<int32_t>(v, what);
      case ValueType::kI64: return read_int<int64_t>(v, what);
      case ValueType::kF32: {
        float x = 0;
        TS_RETURN_IF_ERROR(read(x, what));
        v.f = x;
        return OkStatus();
      }
      case ValueType::kF64: return read(v.f, what);
      case ValueType::kBool: {
        uint8_t x = 0;
        TS_RETURN_IF_ERROR(read(x, what));
        if (x > 1) return DataLoss(what + ": bool value " + std::to_string(x) + " is not 0 or 1");
        v.b = x != 0;
        return OkStatus();
      }
      case ValueType::kString: return read_string(v.s, what);
      case ValueType::kArray: return read_array(v, what, depth);
    }
    return DataLoss(what + ": unknown value type");
  }

  template <class T>
  Status read_uint(Value& v, const std::string& what) {
    T x = 0;
    TS_RETURN_IF_ERROR(read(x, what));
    v.u = x;
    return OkStatus();
  }
  template <class T>
  Status read_int(Value& v, const std::string& what) {
    T x = 0;
    TS_RETURN_IF_ERROR(read(x, what));
    v.i = x;
    return OkStatus();
  }

  Status read_array(Value& v, const std::string& what, int depth) {
    if (depth + 1 > kMaxNestingDepth)
      return DataLoss(what + ": arrays nested deeper than " + std::to_string(kMaxNestingDepth));
    TS_RETURN_IF_ERROR(read_type(v.array_type, what + " array element"));
    uint64_t count = 0;
    TS_RETURN_IF_ERROR(read(count, what + " array count"));
    if (count >= kMaxArrayElems)
      return DataLoss(what + ": array count " + std::to_string(count) + " exceeds the limit of " +
                      std::to_string(kMaxArrayElems));
    const uint64_t min_bytes = min_value_bytes(v.array_type);
    if (count > left() / min_bytes)
      return DataLoss("truncated: " + what + ": array count " + std::to_string(count) + " of " +
                      value_type_name(v.array_type) + " needs at least " +
                      std::to_string(count * min_bytes) + " bytes at offset " +
                      std::to_string(pos_) + ", only " + std::to_string(left()) + " left");
    if (count > kMaxTotalValues - n_values_)  // checked before resize() allocates
      return DataLoss(what + ": array count " + std::to_string(count) + " takes the file past " +
                      std::to_string(kMaxTotalValues) + " metadata values");
    v.array.resize(count);
    for (uint64_t e = 0; e < count; ++e) {
      Value& elem = v.array[e];
      elem.type = v.array_type;
      TS_RETURN_IF_ERROR(read_payload(elem, what + "[" + std::to_string(e) + "]", depth + 1));
    }
    return OkStatus();
  }

  Status read_alignment() {
    const Value* a = out_.find("general.alignment");
    if (!a) return OkStatus();
    if (a->type != ValueType::kU32)
      return DataLoss(std::string("general.alignment is ") + value_type_name(a->type) +
                      ", expected u32");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      return DataLoss("general.alignment " + std::to_string(a->u) + " is not a power of two");
    if (a->u > kMaxAlignment)
      return DataLoss("general.alignment " + std::to_string(a->u) + " exceeds the limit of " +
                      std::to_string(kMaxAlignment));
    out_.alignment_ = static_cast<uint32_t>(a->u);
    return OkStatus();
  }

  Status parse_tensor_infos();
  Status parse_tensor_info(uint64_t index, TensorInfo& t, uint64_t& rel_offset);
  Status place_tensors();

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  File& out_;
  uint64_t n_tensors_ = 0;
  uint64_t n_keys_ = 0;
  uint64_t n_values_ = 0;
  std::vector<uint64_t> rel_offsets_;
};

Status Parser::parse_tensor_info(uint64_t index, TensorInfo& t, uint64_t& rel_offset) {
  TS_RETURN_IF_ERROR(read_string(t.name, "tensor #" + std::to_string(index) + " name"));
  const std::string what = "tensor '" + t.name + "'";
  uint32_t n_dims = 0;
  TS_RETURN_IF_ERROR(read(n_dims, what + " n_dims"));
  if (n_dims < 1 || n_dims > 4)
    return DataLoss(what + ": n_dims " + std::to_string(n_dims) + " is outside 1..4");
  t.rank = static_cast<int>(n_dims);
  std::array<int64_t, 4> ne{};  // GGUF order: innermost first
  int64_t elems = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    TS_RETURN_IF_ERROR(read(ne[d], what + " ne[" + std::to_string(d) + "]"));
    if (ne[d] < 1)
      return DataLoss(what + ": dimension ne[" + std::to_string(d) + "] = " +
                      std::to_string(ne[d]) + " is not positive");
    if (ne[d] > std::numeric_limits<int64_t>::max() / elems)
      return DataLoss(what + ": element count overflows (ne[" + std::to_string(d) +
                      "] = " + std::to_string(ne[d]) + ")");
    elems *= ne[d];
  }
  for (int d = 0; d < t.rank; ++d) t.shape[d] = ne[t.rank - 1 - d];
  for (int d = t.rank; d < 4; ++d) t.shape[d] = 1;
  uint32_t type = 0;
  TS_RETURN_IF_ERROR(read(type, what + " type"));
  auto dtype = dtype_from_gguf(static_cast<int>(std::min<uint32_t>(type, 1u << 30)));
  if (!dtype)
    return Unimplemented(what + ": unsupported tensor type " + std::to_string(type) + " (" +
                         ggml_type_name(type) + ")");
  t.dtype = *dtype;
  std::string row_err = dtype_row_check(t.dtype, ne[0]);
  if (!row_err.empty()) return DataLoss(what + ": " + row_err);
  // A row larger than the whole file can never be in range; rejecting it here also keeps the
  // byte arithmetic below from overflowing (found by the fuzzer: ne[0] near 2^62, f32).
  const auto& traits = dtype_traits(t.dtype);
  if (static_cast<uint64_t>(ne[0] / traits.block_elems) > size_ / traits.block_bytes)
    return OutOfRange(what + ": a row of " + std::to_string(ne[0]) + " " + traits.name +
                      " elements is larger than the file (" + std::to_string(size_) + " bytes)");
  const uint64_t row_bytes = static_cast<uint64_t>(dtype_row_bytes(t.dtype, ne[0]));
  const uint64_t rows = static_cast<uint64_t>(elems / ne[0]);
  if (row_bytes != 0 && rows > std::numeric_limits<uint64_t>::max() / row_bytes)
    return DataLoss(what + ": byte size overflows");
  t.nbytes = row_bytes * rows;
  TS_RETURN_IF_ERROR(read(rel_offset, what + " offset"));
  if (rel_offset % out_.alignment_ != 0)
    return DataLoss(what + ": data offset " + std::to_string(rel_offset) +
                    " is not a multiple of the alignment " + std::to_string(out_.alignment_));
  return OkStatus();
}

Status Parser::parse_tensor_infos() {
  std::unordered_set<std::string> seen;
  // Each info takes at least 24 bytes, so the file size bounds the reservation.
  out_.tensors_.reserve(std::min<uint64_t>(n_tensors_, left() / 24));
  for (uint64_t k = 0; k < n_tensors_; ++k) {
    TensorInfo t;
    uint64_t rel = 0;
    TS_RETURN_IF_ERROR(parse_tensor_info(k, t, rel));
    if (!seen.insert(t.name).second) return DataLoss("duplicate tensor name '" + t.name + "'");
    out_.tensors_.push_back(std::move(t));
    rel_offsets_.push_back(rel);
  }
  return OkStatus();
}

// Turns relative offsets into absolute ones and checks that every tensor lies inside the file
// and that no two overlap.
Status Parser::place_tensors() {
  const uint64_t a = out_.alignment_;
  const uint64_t data_start = (pos_ + a - 1) / a * a;
  out_.data_offset_ = data_start;
  if (out_.tensors_.empty()) return OkStatus();
  if (data_start > size_)
    return OutOfRange("data section starts at " + std::to_string(data_start) +
                      ", past the end of the file (" + std::to_string(size_) + " bytes)");
  const uint64_t data_bytes = size_ - data_start;
  std::vector<size_t> order(out_.tensors_.size());
  for (size_t k = 0; k < order.size(); ++k) {
    TensorInfo& t = out_.tensors_[k];
    const uint64_t rel = rel_offsets_[k];
    if (rel > data_bytes || t.nbytes > data_bytes - rel)
      return OutOfRange("tensor '" + t.name + "': data at offset " + std::to_string(rel) +
                        " + " + std::to_string(t.nbytes) + " bytes runs past the end of the data "
                        "section (" + std::to_string(data_bytes) + " bytes; file " +
                        std::to_string(size_) + " bytes)");
    t.offset = data_start + rel;
    order[k] = k;
  }
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return out_.tensors_[x].offset < out_.tensors_[y].offset;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& prev = out_.tensors_[order[k - 1]];
    const TensorInfo& cur = out_.tensors_[order[k]];
    if (cur.offset < prev.offset + prev.nbytes)
      return DataLoss("tensors '" + prev.name + "' (offset " + std::to_string(prev.offset) +
                      ", " + std::to_string(prev.nbytes) + " bytes) and '" + cur.name +
                      "' (offset " + std::to_string(cur.offset) + ") overlap");
  }
  return OkStatus();
}

Result<std::shared_ptr<File>> File::parse(std::shared_ptr<const void> mapping, size_t size,
                                          std::string path) {
  std::shared_ptr<File> f(new File());
  f->path_ = std::move(path);
  f->mapping_ = std::move(mapping);
  f->base_ = static_cast<const uint8_t*>(f->mapping_.get());
  f->size_ = size;
  Parser parser(f->base_, size, *f);
  Status s = parser.run();
  if (!s.ok()) return s.with_context(f->path_ + ": ");
  return f;
}

Result<std::shared_ptr<File>> File::open_memory(const void* data, size_t size, std::string name) {
  static const uint8_t kEmpty = 0;
  // Non-owning: an aliasing shared_ptr with no control block.
  std::shared_ptr<const void> view(std::shared_ptr<const void>(), data ? data : &kEmpty);
  return parse(std::move(view), size, std::move(name));
}

Result<std::shared_ptr<File>> File::open(const std::string& path) {
  TS_ASSIGN_OR_RETURN(MappedFile m, map_file_readonly(path));
  return parse(std::move(m.data), m.size, path);
}

}  // namespace tessera::gguf

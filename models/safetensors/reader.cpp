// safetensors reader: maps the file, parses the JSON header and checks every tensor's dtype,
// shape, byte count and offsets against the file before anything reads tensor data.

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "models/safetensors/safetensors.h"
#include "models/mapped_file.h"

namespace tessera::safetensors {

using json = nlohmann::json;

namespace {

struct DTypeRow {
  StDType dtype;
  const char* name;
  int size;
};
constexpr DTypeRow kDTypes[] = {
    {StDType::kBool, "BOOL", 1},  {StDType::kU8, "U8", 1},       {StDType::kI8, "I8", 1},
    {StDType::kI16, "I16", 2},    {StDType::kU16, "U16", 2},     {StDType::kF16, "F16", 2},
    {StDType::kBF16, "BF16", 2},  {StDType::kI32, "I32", 4},     {StDType::kU32, "U32", 4},
    {StDType::kF32, "F32", 4},    {StDType::kF64, "F64", 8},     {StDType::kI64, "I64", 8},
    {StDType::kU64, "U64", 8},    {StDType::kF8_E4M3, "F8_E4M3", 1}, {StDType::kF8_E5M2, "F8_E5M2", 1},
    {StDType::kF8_E8M0, "F8_E8M0", 1},
};

// A non-negative integer that fits int64 (JSON numbers may be negative or fractional).
bool as_count(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return false;
    *out = int64_t(u);
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = v.get<int64_t>();
    return true;
  }
  return false;
}

}  // namespace

const char* st_dtype_name(StDType t) {
  for (const auto& r : kDTypes)
    if (r.dtype == t) return r.name;
  return "?";
}
int st_dtype_size(StDType t) {
  for (const auto& r : kDTypes)
    if (r.dtype == t) return r.size;
  return 1;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "] " + st_dtype_name(dtype);
}

const TensorInfo* File::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

Status File::parse_header() {
  if (size_ < 8)
    return DataLoss("truncated: the file is " + std::to_string(size_) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, base_, 8);
  if (n > size_ - 8)
    return DataLoss("truncated: header length " + std::to_string(n) + " runs past the end of the file (" +
                    std::to_string(size_) + " bytes)");
  if (n > kMaxHeaderBytes)
    return InvalidArgument("header length " + std::to_string(n) + " exceeds the format's limit of " +
                           std::to_string(kMaxHeaderBytes) + " bytes");
  const char* text = reinterpret_cast<const char*>(base_ + 8);
  const json h = json::parse(text, text + n, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded()) return InvalidArgument("the header is not valid JSON");
  if (!h.is_object()) return InvalidArgument("the header is not a JSON object");
  const uint64_t data_start = 8 + n, data_size = size_ - data_start;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return InvalidArgument("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return InvalidArgument("__metadata__ value '" + m.key() + "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor '" + name + "': ";
    if (!v.is_object()) return InvalidArgument(what + "entry is not an object");
    TensorInfo t;
    t.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) return InvalidArgument(what + "missing or non-string 'dtype'");
    const std::string dts = dt->get<std::string>();
    const DTypeRow* row = nullptr;
    for (const auto& r : kDTypes)
      if (dts == r.name) row = &r;
    if (!row) return InvalidArgument(what + "unknown dtype '" + dts + "'");
    t.dtype = row->dtype;
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) return InvalidArgument(what + "missing or non-array 'shape'");
    if (sh->size() > size_t(kMaxRank))
      return InvalidArgument(what + "rank " + std::to_string(sh->size()) + " exceeds " + std::to_string(kMaxRank));
    uint64_t bytes = uint64_t(row->size);
    for (const json& d : *sh) {
      int64_t x = 0;
      if (!as_count(d, &x)) return InvalidArgument(what + "shape entry " + d.dump() + " is not a non-negative integer");
      t.shape.push_back(x);
      // Overflow-checked product: a dimension beyond the file's size is caught below anyway.
      if (x != 0 && bytes > std::numeric_limits<uint64_t>::max() / uint64_t(x))
        return InvalidArgument(what + "shape " + t.shape_string() + " overflows");
      bytes *= uint64_t(x);
    }
    auto off = v.find("data_offsets");
    int64_t b = 0, e = 0;
    if (off == v.end() || !off->is_array() || off->size() != 2 || !as_count((*off)[0], &b) || !as_count((*off)[1], &e) || e < b)
      return InvalidArgument(what + "'data_offsets' must be [begin, end] with 0 <= begin <= end");
    if (uint64_t(e - b) != bytes)
      return InvalidArgument(what + "shape " + t.shape_string() + " needs " + std::to_string(bytes) +
                             " bytes but data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + "] span " +
                             std::to_string(e - b));
    if (uint64_t(e) > data_size)
      return DataLoss("truncated: " + what + "data_offsets end " + std::to_string(e) + " is past the end of the data (" +
                      std::to_string(data_size) + " bytes after the header)");
    t.offset = data_start + uint64_t(b);
    t.nbytes = bytes;
    by_name_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  // No two tensors may share bytes.
  std::vector<const TensorInfo*> order;
  for (const auto& t : tensors_)
    if (t.nbytes) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
      return InvalidArgument("tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap");
  }
  return OkStatus();
}

Result<std::shared_ptr<File>> File::parse(std::shared_ptr<const void> mapping, size_t size, std::string path) {
  std::shared_ptr<File> f(new File());
  f->path_ = std::move(path);
  f->mapping_ = std::move(mapping);
  f->base_ = static_cast<const uint8_t*>(f->mapping_.get());
  f->size_ = size;
  Status s = f->parse_header();
  if (!s.ok()) return s.with_context(f->path_ + ": ");
  return f;
}

Result<std::shared_ptr<File>> File::open_memory(const void* data, size_t size, std::string name) {
  static const uint8_t kEmpty = 0;
  std::shared_ptr<const void> view(std::shared_ptr<const void>(), data ? data : &kEmpty);
  return parse(std::move(view), size, std::move(name));
}

Result<std::shared_ptr<File>> File::open(const std::string& path) {
  TS_ASSIGN_OR_RETURN(MappedFile m, map_file_readonly(path));
  return parse(std::move(m.data), m.size, path);
}

// ---- Checkpoint ----

bool is_checkpoint_dir(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec) && std::filesystem::exists(std::filesystem::path(path) / "config.json", ec);
}

TensorRef Checkpoint::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? TensorRef{} : it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> n;
  for (const auto& [k, v] : index_) n.push_back(k);
  std::sort(n.begin(), n.end());
  return n;
}

Result<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
  namespace fs = std::filesystem;
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a directory");
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> shards;
  json weight_map;
  if (fs::exists(index_path, ec)) {
    std::string text;
    TS_ASSIGN_OR_RETURN(text, read_file(index_path.string()));
    const json idx = json::parse(text, nullptr, false);
    if (idx.is_discarded() || !idx.is_object()) return InvalidArgument(index_path.string() + ": not a JSON object");
    auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object()) return InvalidArgument(index_path.string() + ": missing object 'weight_map'");
    weight_map = *wm;
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it.value().is_string()) return InvalidArgument(index_path.string() + ": weight_map['" + it.key() + "'] is not a string");
      const std::string s = it.value().get<std::string>();
      // A shard is a file in this directory: no paths that climb out of it.
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
        return InvalidArgument(index_path.string() + ": shard name '" + s + "' is not a plain file name");
      if (std::find(shards.begin(), shards.end(), s) == shards.end()) shards.push_back(s);
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") shards.push_back(e.path().filename().string());
    std::sort(shards.begin(), shards.end());
  }
  if (shards.empty()) return NotFound(dir + ": no .safetensors files (and no model.safetensors.index.json)");
  for (const std::string& s : shards) {
    const std::string p = (fs::path(dir) / s).string();
    if (!fs::exists(p, ec)) return NotFound(p + ": shard named by model.safetensors.index.json is missing");
    TS_ASSIGN_OR_RETURN(auto f, File::open(p));
    for (const TensorInfo& t : f->tensors()) {
      if (c->index_.count(t.name))
        return InvalidArgument(p + ": tensor '" + t.name + "' also appears in " + c->index_[t.name].file->path());
      c->index_[t.name] = TensorRef{f.get(), &t};
    }
    c->files_.push_back(std::move(f));
  }
  // The index must agree with the shards: every tensor it lists is in the shard it names.
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    const TensorRef r = c->find(it.key());
    const std::string shard = it.value().get<std::string>();
    if (!r.file) return NotFound(index_path.string() + ": tensor '" + it.key() + "' is not in shard " + shard);
    if (fs::path(r.file->path()).filename().string() != shard)
      return InvalidArgument(index_path.string() + ": tensor '" + it.key() + "' is listed in " + shard + " but found in " +
                             r.file->path());
  }
  return c;
}

}  // namespace tessera::safetensors

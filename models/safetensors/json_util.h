// Small helpers over nlohmann::json for the checkpoint's JSON files: parse without exceptions,
// typed lookups whose errors name the file and the key.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace tessera::safetensors {

using json = nlohmann::json;

// Parses the file at |path| (NotFound when missing, InvalidArgument naming it when malformed).
Result<json> read_json_file(const std::string& path);

// A JSON object read from |file|: every getter's error names the file and the key.
class JsonObject {
 public:
  JsonObject(const json& j, std::string file) : j_(j), file_(std::move(file)) {}
  const json* find(const std::string& key) const;  // nullptr when absent or null
  Result<int64_t> get_int(const std::string& key) const;
  Result<int64_t> get_int(const std::string& key, int64_t fallback) const;
  // The same for a value that must fit an int (a size): 2^32 + 1 is an error, not a 1.
  Result<int> get_int32(const std::string& key) const;
  Result<int> get_int32(const std::string& key, int64_t fallback) const;
  Result<double> get_float(const std::string& key, double fallback) const;
  Result<bool> get_bool(const std::string& key, bool fallback) const;
  Result<std::string> get_string(const std::string& key) const;
  Result<std::string> get_string(const std::string& key, std::string fallback) const;
  const std::string& file() const { return file_; }

 private:
  Status missing(const std::string& key) const;
  Status out_of_int(const std::string& key, int64_t v) const;
  Status mistyped(const std::string& key, const char* want) const;
  const json& j_;
  std::string file_;
};

}  // namespace tessera::safetensors

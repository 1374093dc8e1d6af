// Reads the hex-encoded golden files written by gen_golden.py / gen_spm_golden.py.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::testing {

inline std::string unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

// One line: "<tag> <arg> <hex text> : <fields...>"
struct GoldenRecord {
  std::string tag, arg, text;
  std::vector<std::string> fields;
};

inline std::vector<GoldenRecord> read_golden(const std::string& path) {
  std::vector<GoldenRecord> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    GoldenRecord r;
    std::string hex, colon, field;
    in >> r.tag >> r.arg >> hex >> colon;
    if (colon != ":") continue;
    r.text = unhex(hex);
    while (in >> field) r.fields.push_back(field);
    out.push_back(std::move(r));
  }
  return out;
}

inline std::string test_data_path(const std::string& name) {
  const char* dir = std::getenv("TESSERA_TEST_DATA");
  return std::string(dir ? dir : "tests/data") + "/" + name;
}

}  // namespace tessera::testing

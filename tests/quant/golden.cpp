#include "tests/quant/golden.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/wait.h>
#include <unistd.h>

namespace tessera::testing {
namespace {

std::string data_dir() {
  const char* d = std::getenv("TESSERA_TEST_DATA");
  return std::string(d ? d : "tests/data") + "/quant";
}

std::vector<uint8_t> read_file(const std::string& path, std::string* error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *error = path + ": cannot open (set TESSERA_TEST_DATA to tests/data)";
    return {};
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Sequential little-endian reads with bounds checks; |ok| turns false past the end.
struct Reader {
  const std::vector<uint8_t>& buf;
  size_t pos = 0;
  bool ok = true;
  uint32_t u32() {
    uint32_t v = 0;
    take(&v, 4);
    return v;
  }
  void take(void* dst, size_t n) {
    if (pos + n > buf.size()) { ok = false; return; }
    std::memcpy(dst, buf.data() + pos, n);
    pos += n;
  }
  std::vector<float> floats(size_t n) {
    if (pos + 4 * n > buf.size()) { ok = false; return {}; }
    std::vector<float> v(n);
    if (n > 0) std::memcpy(v.data(), buf.data() + pos, 4 * n);
    pos += 4 * n;
    return v;
  }
};

}  // namespace

std::vector<GgufGolden> load_gguf_golden(std::string* error) {
  const std::string path = data_dir() + "/gguf_golden.bin";
  const auto buf = read_file(path, error);
  if (buf.empty()) return {};
  Reader r{buf};
  char magic[4];
  r.take(magic, 4);
  if (!r.ok || std::memcmp(magic, "TQG1", 4) != 0) {
    *error = path + ": bad magic";
    return {};
  }
  const uint32_t count = r.u32();
  std::vector<GgufGolden> out;
  for (uint32_t i = 0; i < count && r.ok; ++i) {
    GgufGolden g;
    g.gguf_type = int(r.u32());
    g.kind = int(r.u32());
    g.n = r.u32();
    const uint32_t nbytes = r.u32();
    if (g.kind == 1) g.input = r.floats(size_t(g.n));
    g.bytes.resize(nbytes);
    r.take(g.bytes.data(), nbytes);
    g.expected = r.floats(size_t(g.n));
    out.push_back(std::move(g));
  }
  if (!r.ok) {
    *error = path + ": truncated";
    return {};
  }
  return out;
}

std::vector<GgufGolden> gguf_golden_of(int gguf_type, int kind, std::string* error) {
  std::vector<GgufGolden> out;
  for (auto& g : load_gguf_golden(error))
    if (g.gguf_type == gguf_type && g.kind == kind) out.push_back(std::move(g));
  return out;
}

std::vector<uint8_t> fp8_golden_section(uint32_t tag, uint32_t* count, std::string* error) {
  const std::string path = data_dir() + "/fp8_golden.bin";
  const auto buf = read_file(path, error);
  if (buf.empty()) return {};
  Reader r{buf};
  r.pos = 4;
  const uint32_t n_sections = r.u32();
  // Payload sizes per tag: decode tables are f32 per code; encode tables f32 + u8 per value.
  for (uint32_t s = 0; s < n_sections && r.ok; ++s) {
    const uint32_t t = r.u32(), c = r.u32();
    const size_t size = (t == 3 || t == 4) ? size_t(c) * 5 : size_t(c) * 4;
    std::vector<uint8_t> payload(size);
    r.take(payload.data(), size);
    if (t == tag && r.ok) {
      *count = c;
      return payload;
    }
  }
  *error = path + ": no section " + std::to_string(tag);
  return {};
}

int64_t first_bit_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return int64_t(i);
  return -1;
}

int run_gguf_check(const std::vector<GgufCheck>& checks, std::string* log) {
  char path[] = "/tmp/tessera_gguf_check_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) { *log = "mkstemp failed"; return 77; }
  close(fd);
  {
    std::ofstream f(path, std::ios::binary);
    auto u32 = [&](uint32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); };
    f.write("TQC1", 4);
    u32(uint32_t(checks.size()));
    for (const auto& c : checks) {
      u32(uint32_t(dtype_traits(c.dtype).gguf_type));
      u32(uint32_t(c.ours.size()));
      u32(uint32_t(c.bytes.size()));
      f.write(reinterpret_cast<const char*>(c.bytes.data()), std::streamsize(c.bytes.size()));
      f.write(reinterpret_cast<const char*>(c.ours.data()), std::streamsize(4 * c.ours.size()));
    }
  }
  // TESSERA_PYTHON: the project venv's interpreter that CMake was configured with (tests/).
  const char* python = std::getenv("TESSERA_PYTHON");
  const std::string cmd = std::string(python && *python ? python : "python3") + " " + data_dir() + "/gguf_check.py " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) { std::remove(path); *log = "popen failed"; return 77; }
  char line[512];
  while (fgets(line, sizeof line, p)) *log += line;
  const int status = pclose(p);
  std::remove(path);
  if (status == -1 || !WIFEXITED(status)) return 77;
  const int rc = WEXITSTATUS(status);
  return rc == 127 ? 77 : rc;  // 127: no python3
}

}  // namespace tessera::testing

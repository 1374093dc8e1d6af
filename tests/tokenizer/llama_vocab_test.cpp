// llama.cpp's own tokenizer test vectors, for every family the llama-cpp-python sdist ships:
// models/ggml-vocab-<family>.gguf (vocab-only GGUFs) with .inp (texts separated by
// "\n__ggml_vocab_test__\n") and .out (the expected ids, one line per text), tokenized without
// BOS/EOS and without parsing special tokens. fetch_llama_vocab.sh brings them into a cache
// outside the checkout. Prints the pass count per family and the detokenisation round trips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/model.h"
#include "tessera/tessera.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// The folder with the vocabularies, or "" with |why| set.
std::string fetch_vocab_dir(std::string* why, int* rc) {
  const char* py = std::getenv("TESSERA_PYTHON");
  const std::string cmd = std::string(TESSERA_VOCAB_FETCH) + " " + (py && *py ? py : "python3");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    *why = "cannot run " + cmd;
    *rc = -1;
    return "";
  }
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (*rc != 0) *why = cmd + " exited with " + std::to_string(*rc);
  return *rc == 0 ? out : "";
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split_inputs(const std::string& raw) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < raw.size()) {  // a separator that ends the file starts no further text
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      out.push_back(raw.substr(pos));
      break;
    }
    out.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> read_expected(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::vector<int32_t>> out;
  for (std::string line; std::getline(f, line);) {
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    for (int32_t id; ss >> id;) ids.push_back(id);
    out.push_back(std::move(ids));
  }
  return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

struct FamilyResult {
  std::string family;
  size_t tests = 0, passed = 0, round_trips = 0, exact_text = 0;
};

// Runs one family; |fails| collects the first few mismatches.
FamilyResult run_family(const fs::path& inp, std::vector<std::string>& fails) {
  FamilyResult r;
  std::string name = inp.filename().string();  // ggml-vocab-<family>.gguf.inp
  r.family = name.substr(11, name.size() - 11 - 9);
  const fs::path gguf = inp.parent_path() / ("ggml-vocab-" + r.family + ".gguf");
  auto tok = load_tokenizer(gguf.string());
  if (!tok.ok()) {
    fails.push_back(r.family + ": " + tok.status().to_string());
    return r;
  }
  const Tokenizer& t = **tok;
  const auto inputs = split_inputs(read_all(inp));
  fs::path out = inp;
  out.replace_extension(".out");
  const auto expected = read_expected(out);
  if (inputs.size() != expected.size()) {
    fails.push_back(r.family + ": " + std::to_string(inputs.size()) + " inputs but " +
                    std::to_string(expected.size()) + " expected lines");
    return r;
  }
  r.tests = inputs.size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = t.encode(inputs[i], false, false);
    const bool ok = ids == expected[i];
    r.passed += ok;
    // Detokenisation: ours decodes to what the expected ids decode to (for lossy families such
    // as WordPiece, which lower-cases), and for the others back to the input itself.
    const std::string text = t.decode(ids);
    r.round_trips += text == t.decode(expected[i]);
    r.exact_text += text == inputs[i];
    if (!ok && fails.size() < 40)
      fails.push_back(r.family + " #" + std::to_string(i) + " '" + inputs[i].substr(0, 60) + "': got " +
                      ids_str(ids) + "want " + ids_str(expected[i]));
  }
  return r;
}

TEST(LlamaVocab, EveryFamilyMatchesLlamaCpp) {
  std::string why;
  int rc = 0;
  const std::string dir = fetch_vocab_dir(&why, &rc);
  if (dir.empty() && rc == 3) {
    TESSERA_SKIP_MISSING() << "llama.cpp's vocab files: " << why;
  }
  ASSERT_FALSE(dir.empty()) << why;
  std::vector<fs::path> inps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("ggml-vocab-", 0) == 0 && n.size() > 9 && n.substr(n.size() - 9) == ".gguf.inp") inps.push_back(e.path());
  }
  std::sort(inps.begin(), inps.end());
  // The sdist of 0.3.36 has 15 families with test vectors; fewer means a broken download.
  ASSERT_GE(inps.size(), 15u) << dir;

  std::vector<std::string> fails;
  size_t total = 0, passed = 0;
  std::printf("%-16s %7s %11s %11s\n", "family", "passed", "round trip", "exact text");
  for (const fs::path& inp : inps) {
    const FamilyResult r = run_family(inp, fails);
    std::printf("%-16s %3zu/%-3zu %5zu/%-5zu %5zu/%-5zu\n", r.family.c_str(), r.passed, r.tests, r.round_trips,
                r.tests, r.exact_text, r.tests);
    total += r.tests;
    passed += r.passed;
    EXPECT_GT(r.tests, 0u) << r.family;
    EXPECT_EQ(r.passed, r.tests) << r.family;
    EXPECT_EQ(r.round_trips, r.tests) << r.family << ": decode(ours) != decode(expected)";
    // WordPiece normalises (lower case, no accents, no spacing); every other family's ids
    // spell the input exactly.
    if (r.family != "bert-bge") {
      EXPECT_EQ(r.exact_text, r.tests) << r.family << ": decode(encode(text)) != text";
    }
  }
  std::printf("total            %zu/%zu\n", passed, total);
  for (const std::string& f : fails) std::printf("  FAIL %s\n", f.c_str());
}

// A vocab-only GGUF through the C API and the CLI, as a user would try it.
TEST(LlamaVocab, VocabOnlyGgufTokenizesThroughCApiAndCli) {
  std::string why;
  int rc = 0;
  const std::string dir = fetch_vocab_dir(&why, &rc);
  if (dir.empty() && rc == 3) {
    TESSERA_SKIP_MISSING() << "llama.cpp's vocab files: " << why;
  }
  ASSERT_FALSE(dir.empty()) << why;
  const std::string path = dir + "/ggml-vocab-llama-spm.gguf";
  const std::string text = "ied 4 \xC2\xBD months";
  const std::vector<int32_t> want = {474, 287, 29871, 29946, 29871, 30226, 7378};  // its .out line

  tessera_model* m = nullptr;
  ASSERT_EQ(tessera_model_load_vocab(path.c_str(), &m), TESSERA_OK) << tessera_last_error();
  size_t n = 0;
  ASSERT_EQ(tessera_tokenize(m, text.c_str(), 1, nullptr, 0, &n), TESSERA_OK);
  std::vector<int32_t> ids(n);
  ASSERT_EQ(tessera_tokenize(m, text.c_str(), 1, ids.data(), ids.size(), &n), TESSERA_OK);
  std::vector<int32_t> with_bos = {1};
  with_bos.insert(with_bos.end(), want.begin(), want.end());
  EXPECT_EQ(ids, with_bos);
  EXPECT_EQ(tessera_model_vocab_size(m), 32000);
  tessera_context* ctx = nullptr;
  EXPECT_NE(tessera_context_create(m, nullptr, &ctx), TESSERA_OK);  // no weights to run
  EXPECT_NE(std::string(tessera_last_error()).find("vocab-only"), std::string::npos) << tessera_last_error();
  tessera_model_free(m);

  const char* bin = std::getenv("TESSERA_BIN");
  const std::string cmd = std::string(bin && *bin ? bin : "bin") + "/tessera tokenize -q -m " + path +
                          " --no-special --format csv -p '" + text + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr) << cmd;
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  EXPECT_EQ(pclose(p), 0) << cmd << "\n" << out;
  EXPECT_EQ(out, "474,287,29871,29946,29871,30226,7378\n") << cmd;
}

}  // namespace
}  // namespace tessera

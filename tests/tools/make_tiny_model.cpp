// make_tiny_model: writes random-weight tiny `llama` and `qwen3` GGUF models for tests.
//
//   make_tiny_model --arch llama --dtype q4_0 --out tiny.gguf [--seed 1]
//   make_tiny_model --all DIR        # tiny-{llama,qwen3}-{f32,f16,q8_0,q4_0,q4_1}.gguf
//
// 2 layers, dim 64, 4 heads / 2 KV heads, FFN 128, a byte-level vocabulary of 256 byte tokens
// plus 4 specials (bos, eos, <|im_start|>, <|im_end|>). llama: head dim 16, separate output head.
// qwen3: head dim 32 (key_length != dim / heads, as in real Qwen3), QK-norm, tied output head.
// The float weights depend only on the seed (not on the dtype), so models of different dtypes
// are quantisations of the same model and their logits can be compared.
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <map>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "models/gguf/gguf.h"

namespace tessera {
namespace {

struct Config {
  std::string arch = "llama";
  DType dtype = DType::kF32;
  uint64_t seed = 1;
  int n_layer = 2;
  int n_embd = 64;
  int n_head = 4;
  int n_head_kv = 2;
  int head_dim = 16;
  int n_ff = 128;
  int n_ctx = 256;
  bool qk_norm = false;
  bool tied_output = false;
  int n_vocab = 260;  // 256 byte tokens + 4 specials; larger vocabularies pad with unused tokens
};

Config config_for(const std::string& arch) {
  Config c;
  c.arch = arch;
  if (arch == "qwen3") {
    c.head_dim = 32;
    c.qk_norm = true;
    c.tied_output = true;
  }
  return c;
}

// Gaussian floats from mt19937_64 through Box-Muller: std::normal_distribution differs between
// standard libraries, and these files should be the same everywhere.
class Gauss {
 public:
  explicit Gauss(uint64_t seed) : rng_(seed) {}
  float next() {
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) / 9007199254740993.0;
    const double u2 = static_cast<double>(rng_() >> 11) / 9007199254740992.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  std::vector<float> fill(size_t n, float mean, float stddev) {
    std::vector<float> v(n);
    for (auto& x : v) x = mean + stddev * next();
    return v;
  }

 private:
  std::mt19937_64 rng_;
};

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the rest map to U+0100...
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out(256);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(extra++);
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[b] = s;
  }
  return out;
}

void add_tokenizer(gguf::Writer& w, int n_vocab) {
  std::vector<std::string> tokens = byte_tokens();
  std::vector<int32_t> types(256, 1);  // normal
  for (const char* special : {"<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(special);
    types.push_back(3);  // control
  }
  while (int(tokens.size()) < n_vocab) {  // bench-sized models: unused filler tokens
    tokens.push_back("<unused_" + std::to_string(tokens.size()) + ">");
    types.push_back(5);
  }
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "default");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", {});
  w.add_u32("tokenizer.ggml.bos_token_id", 256);
  w.add_u32("tokenizer.ggml.eos_token_id", 257);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  w.add_string("tokenizer.chat_template",
               "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
               "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
               "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
}

// Quantises |values| (rows of shape.back()) into |dtype| and adds the tensor.
Status add_weight(gguf::Writer& w, const std::string& name, DType dtype,
                  const std::vector<int64_t>& shape, const std::vector<float>& values) {
  const int64_t cols = shape.back();
  const int64_t rows = static_cast<int64_t>(values.size()) / cols;
  const auto& tr = dtype_traits(dtype);
  std::string row_err = dtype_row_check(dtype, cols);
  if (!row_err.empty()) return InvalidArgument(name + ": " + row_err);
  const int64_t row_bytes = dtype_row_bytes(dtype, cols);
  std::vector<uint8_t> bytes(static_cast<size_t>(row_bytes * rows));
  for (int64_t r = 0; r < rows; ++r)
    tr.quantize_row(values.data() + r * cols, bytes.data() + r * row_bytes, cols);
  return w.add_tensor(name, dtype, shape, bytes.data(), bytes.size());
}

Status build(const Config& c, gguf::Writer& w) {
  const std::string& a = c.arch;
  const int n_vocab = c.n_vocab;
  w.add_string("general.architecture", a);
  w.add_string("general.name", "tessera-tiny-" + a);
  w.add_u32("general.file_type", static_cast<uint32_t>(dtype_traits(c.dtype).gguf_type));
  w.add_u32(a + ".block_count", c.n_layer);
  w.add_u32(a + ".context_length", c.n_ctx);
  w.add_u32(a + ".embedding_length", c.n_embd);
  w.add_u32(a + ".feed_forward_length", c.n_ff);
  w.add_u32(a + ".attention.head_count", c.n_head);
  w.add_u32(a + ".attention.head_count_kv", c.n_head_kv);
  w.add_u32(a + ".attention.key_length", c.head_dim);
  w.add_u32(a + ".attention.value_length", c.head_dim);
  w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_f32(a + ".rope.freq_base", 10000.0f);
  w.add_u32(a + ".rope.dimension_count", c.head_dim);
  w.add_u32(a + ".vocab_size", n_vocab);
  add_tokenizer(w, n_vocab);

  Gauss g(c.seed);
  const int64_t d = c.n_embd, q_dim = int64_t{c.n_head} * c.head_dim,
                kv_dim = int64_t{c.n_head_kv} * c.head_dim, ff = c.n_ff;
  auto proj = [&](int64_t out, int64_t in) {
    return g.fill(static_cast<size_t>(out * in), 0.0f, 1.0f / std::sqrt(static_cast<float>(in)));
  };
  auto norm = [&](int64_t n) { return g.fill(static_cast<size_t>(n), 1.0f, 0.1f); };
  TS_RETURN_IF_ERROR(add_weight(w, "token_embd.weight", c.dtype, {n_vocab, d},
                                g.fill(static_cast<size_t>(n_vocab * d), 0.0f, 1.0f)));
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    TS_RETURN_IF_ERROR(add_weight(w, p + "attn_norm.weight", DType::kF32, {d}, norm(d)));
    TS_RETURN_IF_ERROR(add_weight(w, p + "attn_q.weight", c.dtype, {q_dim, d}, proj(q_dim, d)));
    TS_RETURN_IF_ERROR(add_weight(w, p + "attn_k.weight", c.dtype, {kv_dim, d}, proj(kv_dim, d)));
    TS_RETURN_IF_ERROR(add_weight(w, p + "attn_v.weight", c.dtype, {kv_dim, d}, proj(kv_dim, d)));
    if (c.qk_norm) {
      TS_RETURN_IF_ERROR(add_weight(w, p + "attn_q_norm.weight", DType::kF32, {c.head_dim},
                                    norm(c.head_dim)));
      TS_RETURN_IF_ERROR(add_weight(w, p + "attn_k_norm.weight", DType::kF32, {c.head_dim},
                                    norm(c.head_dim)));
    }
    TS_RETURN_IF_ERROR(add_weight(w, p + "attn_output.weight", c.dtype, {d, q_dim}, proj(d, q_dim)));
    TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_norm.weight", DType::kF32, {d}, norm(d)));
    TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_gate.weight", c.dtype, {ff, d}, proj(ff, d)));
    TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_up.weight", c.dtype, {ff, d}, proj(ff, d)));
    TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_down.weight", c.dtype, {d, ff}, proj(d, ff)));
  }
  TS_RETURN_IF_ERROR(add_weight(w, "output_norm.weight", DType::kF32, {d}, norm(d)));
  if (!c.tied_output)
    TS_RETURN_IF_ERROR(add_weight(w, "output.weight", c.dtype, {n_vocab, d}, proj(n_vocab, d)));
  return OkStatus();
}

Status write_model(const Config& c, const std::string& path) {
  gguf::Writer w;
  TS_RETURN_IF_ERROR(build(c, w));
  TS_RETURN_IF_ERROR(w.write(path));
  std::printf("wrote %s (%s, %s)\n", path.c_str(), c.arch.c_str(), dtype_name(c.dtype));
  return OkStatus();
}

int usage() {
  std::fprintf(stderr,
               "usage: make_tiny_model --arch llama|qwen3 --dtype f32|f16|q8_0|q4_0|q4_1 "
               "--out FILE [--seed N]\n"
               "         [--layers N --dim N --heads N --kv-heads N --ff N --vocab N --ctx N]  (bench-sized models)\n"
               "       make_tiny_model --all DIR [--seed N]\n");
  return 2;
}

int run(int argc, char** argv) {
  std::string arch = "llama", dtype = "f32", out, all_dir;
  uint64_t seed = 1;
  std::map<std::string, int> dims;  // shape overrides: --layers --dim --heads --kv-heads --ff --vocab --ctx
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string val = argv[++i];
    if (arg == "--arch") arch = val;
    else if (arg == "--dtype") dtype = val;
    else if (arg == "--out") out = val;
    else if (arg == "--all") all_dir = val;
    else if (arg == "--seed") seed = std::strtoull(val.c_str(), nullptr, 10);
    else if (arg == "--layers" || arg == "--dim" || arg == "--heads" || arg == "--kv-heads" || arg == "--ff" ||
             arg == "--vocab" || arg == "--ctx") {
      const int v = std::atoi(val.c_str());
      if (v <= 0) return usage();
      dims[arg] = v;
    } else return usage();
  }
  std::vector<std::pair<std::string, std::string>> jobs;  // (arch, dtype), written to paths[k]
  std::vector<std::string> paths;
  if (!all_dir.empty()) {
    for (const char* a : {"llama", "qwen3"})
      for (const char* t : {"f32", "f16", "q8_0", "q4_0", "q4_1"}) {
        jobs.emplace_back(a, t);
        paths.push_back(all_dir + "/tiny-" + a + "-" + t + ".gguf");
      }
  } else {
    if (out.empty()) return usage();
    jobs.emplace_back(arch, dtype);
    paths.push_back(out);
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (jobs[k].first != "llama" && jobs[k].first != "qwen3") return usage();
    auto dt = dtype_from_name(jobs[k].second);
    const bool supported = dt && (*dt == DType::kF32 || *dt == DType::kF16 ||
                                  *dt == DType::kQ8_0 || *dt == DType::kQ4_0 ||
                                  *dt == DType::kQ4_1);
    if (!supported) return usage();
    Config c = config_for(jobs[k].first);
    c.dtype = *dt;
    c.seed = seed;
    if (dims.count("--layers")) c.n_layer = dims["--layers"];
    if (dims.count("--dim")) c.n_embd = dims["--dim"];
    if (dims.count("--heads")) c.n_head = dims["--heads"];
    if (dims.count("--kv-heads")) c.n_head_kv = dims["--kv-heads"];
    if (dims.count("--ff")) c.n_ff = dims["--ff"];
    if (dims.count("--ctx")) c.n_ctx = dims["--ctx"];
    if (dims.count("--vocab")) c.n_vocab = std::max(260, dims["--vocab"]);
    if (dims.count("--dim") || dims.count("--heads")) c.head_dim = c.n_embd / c.n_head;
    Status st = write_model(c, paths[k]);
    if (!st.ok()) {
      std::fprintf(stderr, "make_tiny_model: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::run(argc, argv); }

// make_tiny_model: writes random-weight tiny GGUF models for tests: dense `llama` and `qwen3`,
// and the mixture-of-experts `mixtral`, `qwen2moe`, `qwen3moe` and `olmoe`.
//
//   make_tiny_model --arch llama --dtype q4_0 --out tiny.gguf [--seed 1]
//   make_tiny_model --all DIR        # tiny-{llama,qwen3}-{f32,f16,q8_0,q4_0,q4_1}.gguf
//   make_tiny_model --all-moe DIR    # tiny-{mixtral,qwen2moe,qwen3moe,olmoe}-{...}.gguf
//
// 2 layers, dim 64, 4 heads / 2 KV heads, FFN 128, a byte-level vocabulary of 256 byte tokens
// plus 4 specials (bos, eos, <|im_start|>, <|im_end|>). llama: head dim 16, separate output head.
// qwen3: head dim 32 (key_length != dim / heads, as in real Qwen3), QK-norm, tied output head.
// MoE (tensor and key names as in the `gguf` package's constants):
//   mixtral:  GGUF arch `llama` with 8 experts, softmax top-2 renormalised, expert FFN 64.
//   qwen2moe: q/k/v biases, 8 experts top-4 (not renormalised), expert FFN 32, and a shared
//             expert (FFN 64) scaled by sigmoid(x . ffn_gate_inp_shexp), that gate 1-D [dim].
//   qwen3moe: qwen3's attention, 8 experts top-4 renormalised, expert FFN 32.
//   olmoe:    QK-norm over the whole q and k projections, 8 experts top-2, not renormalised.
// Routers (ffn_gate_inp) and the shared-expert gate stay f32 in every dtype, as converters keep
// them. --expert-layout split writes the older per-expert tensors blk.N.ffn_{gate,up,down}.E.weight
// instead of the merged 3-D blk.N.ffn_{gate,up,down}_exps.weight, with the same values.
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
  bool qk_norm_full = false;  // olmoe: norms over [heads * head_dim]
  bool qkv_bias = false;
  bool tied_output = false;
  std::string gguf_arch;      // general.architecture when it differs from |arch| (mixtral: llama)
  int n_expert = 0;           // 0: dense FFN
  int n_expert_used = 0;
  int n_ff_exp = 0;
  int n_ff_shexp = 0;         // 0: no shared expert
  bool split_experts = false;
  int n_vocab = 260;  // 256 byte tokens + 4 specials; larger vocabularies pad with unused tokens
};

Config config_for(const std::string& arch) {
  Config c;
  c.arch = arch;
  if (arch == "qwen3") {
    c.head_dim = 32;
    c.qk_norm = true;
    c.tied_output = true;
  } else if (arch == "mixtral") {
    c.gguf_arch = "llama";
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff = c.n_ff_exp = 64;
  } else if (arch == "qwen2moe") {
    c.qkv_bias = true;
    c.n_expert = 8;
    c.n_expert_used = 4;
    c.n_ff_exp = 32;
    c.n_ff_shexp = 64;
  } else if (arch == "qwen3moe") {
    c.head_dim = 32;
    c.qk_norm = true;
    c.tied_output = true;
    c.n_expert = 8;
    c.n_expert_used = 4;
    c.n_ff_exp = 32;
  } else if (arch == "olmoe") {
    c.qk_norm = c.qk_norm_full = true;
    c.n_expert = 8;
    c.n_expert_used = 2;
    c.n_ff_exp = 32;
  }
  return c;
}

bool known_arch(const std::string& a) {
  return a == "llama" || a == "qwen3" || a == "mixtral" || a == "qwen2moe" || a == "qwen3moe" || a == "olmoe";
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

// The routed experts of one layer: values for all E experts drawn at once ([E, rows, cols]), then
// written as one merged 3-D tensor or as E per-expert tensors (bit-identical rows either way).
Status add_experts(gguf::Writer& w, const Config& c, const std::string& p, const std::string& kind,
                   int64_t rows, int64_t cols, const std::vector<float>& values) {
  const int64_t E = c.n_expert;
  if (!c.split_experts) return add_weight(w, p + kind + "_exps.weight", c.dtype, {E, rows, cols}, values);
  const size_t per = size_t(rows * cols);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<float> one(values.begin() + long(size_t(e) * per), values.begin() + long(size_t(e + 1) * per));
    TS_RETURN_IF_ERROR(add_weight(w, p + kind + "." + std::to_string(e) + ".weight", c.dtype, {rows, cols}, one));
  }
  return OkStatus();
}

// Router [E, dim] (f32), routed experts, and the optional shared expert with its 1-D gate.
Status add_moe_ffn(gguf::Writer& w, const Config& c, Gauss& g, const std::string& p) {
  const int64_t d = c.n_embd, E = c.n_expert, fe = c.n_ff_exp, fs = c.n_ff_shexp;
  const float sd = 1.0f / std::sqrt(float(d)), se = 1.0f / std::sqrt(float(fe));
  TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_gate_inp.weight", DType::kF32, {E, d}, g.fill(size_t(E * d), 0.0f, sd)));
  TS_RETURN_IF_ERROR(add_experts(w, c, p, "ffn_gate", fe, d, g.fill(size_t(E * fe * d), 0.0f, sd)));
  TS_RETURN_IF_ERROR(add_experts(w, c, p, "ffn_up", fe, d, g.fill(size_t(E * fe * d), 0.0f, sd)));
  TS_RETURN_IF_ERROR(add_experts(w, c, p, "ffn_down", d, fe, g.fill(size_t(E * d * fe), 0.0f, se)));
  if (fs == 0) return OkStatus();
  const float ss = 1.0f / std::sqrt(float(fs));
  TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_gate_inp_shexp.weight", DType::kF32, {d}, g.fill(size_t(d), 0.0f, sd)));
  TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_gate_shexp.weight", c.dtype, {fs, d}, g.fill(size_t(fs * d), 0.0f, sd)));
  TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_up_shexp.weight", c.dtype, {fs, d}, g.fill(size_t(fs * d), 0.0f, sd)));
  return add_weight(w, p + "ffn_down_shexp.weight", c.dtype, {d, fs}, g.fill(size_t(d * fs), 0.0f, ss));
}

void add_moe_keys(gguf::Writer& w, const Config& c, const std::string& a) {
  w.add_u32(a + ".expert_count", uint32_t(c.n_expert));
  w.add_u32(a + ".expert_used_count", uint32_t(c.n_expert_used));
  if (a != "llama") w.add_u32(a + ".expert_feed_forward_length", uint32_t(c.n_ff_exp));
  if (c.n_ff_shexp > 0) w.add_u32(a + ".expert_shared_feed_forward_length", uint32_t(c.n_ff_shexp));
}

Status build(const Config& c, gguf::Writer& w) {
  const std::string& a = c.gguf_arch.empty() ? c.arch : c.gguf_arch;
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
  if (c.n_expert > 0) add_moe_keys(w, c, a);
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
    if (c.qkv_bias) {
      TS_RETURN_IF_ERROR(add_weight(w, p + "attn_q.bias", DType::kF32, {q_dim}, g.fill(size_t(q_dim), 0.0f, 0.1f)));
      TS_RETURN_IF_ERROR(add_weight(w, p + "attn_k.bias", DType::kF32, {kv_dim}, g.fill(size_t(kv_dim), 0.0f, 0.1f)));
      TS_RETURN_IF_ERROR(add_weight(w, p + "attn_v.bias", DType::kF32, {kv_dim}, g.fill(size_t(kv_dim), 0.0f, 0.1f)));
    }
    if (c.qk_norm) {
      const int64_t qn = c.qk_norm_full ? q_dim : c.head_dim, kn = c.qk_norm_full ? kv_dim : c.head_dim;
      TS_RETURN_IF_ERROR(add_weight(w, p + "attn_q_norm.weight", DType::kF32, {qn}, norm(qn)));
      TS_RETURN_IF_ERROR(add_weight(w, p + "attn_k_norm.weight", DType::kF32, {kn}, norm(kn)));
    }
    TS_RETURN_IF_ERROR(add_weight(w, p + "attn_output.weight", c.dtype, {d, q_dim}, proj(d, q_dim)));
    TS_RETURN_IF_ERROR(add_weight(w, p + "ffn_norm.weight", DType::kF32, {d}, norm(d)));
    if (c.n_expert > 0) {
      TS_RETURN_IF_ERROR(add_moe_ffn(w, c, g, p));
      continue;
    }
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
               "usage: make_tiny_model --arch llama|qwen3|mixtral|qwen2moe|qwen3moe|olmoe\n"
               "         --dtype f32|f16|q8_0|q4_0|q4_1 --out FILE [--seed N] [--expert-layout merged|split]\n"
               "         [--layers N --dim N --heads N --kv-heads N --ff N --vocab N --ctx N]  (bench-sized models)\n"
               "         [--experts N --experts-used N --expert-ff N --shared-ff N]  (MoE archs)\n"
               "       make_tiny_model --all DIR [--seed N]      (llama, qwen3)\n"
               "       make_tiny_model --all-moe DIR [--seed N]  (mixtral, qwen2moe, qwen3moe, olmoe)\n");
  return 2;
}

// Applies the shape overrides; returns false when they do not make a valid model.
bool apply_dims(std::map<std::string, int>& dims, Config& c) {
  auto has = [&](const char* k) { return dims.count(k) > 0; };
  if (has("--layers")) c.n_layer = dims["--layers"];
  if (has("--dim")) c.n_embd = dims["--dim"];
  if (has("--heads")) c.n_head = dims["--heads"];
  if (has("--kv-heads")) c.n_head_kv = dims["--kv-heads"];
  if (has("--ff")) c.n_ff = dims["--ff"];
  if (has("--ctx")) c.n_ctx = dims["--ctx"];
  if (has("--vocab")) c.n_vocab = std::max(260, dims["--vocab"]);
  if (has("--dim") || has("--heads")) c.head_dim = c.n_embd / c.n_head;
  if (c.n_expert == 0) return !(has("--experts") || has("--experts-used") || has("--expert-ff") || has("--shared-ff"));
  if (has("--experts")) c.n_expert = dims["--experts"];
  if (has("--experts-used")) c.n_expert_used = dims["--experts-used"];
  // Mixtral's GGUF has no expert width key: feed_forward_length is the expert width.
  if (c.arch == "mixtral" && has("--ff")) c.n_ff_exp = c.n_ff;
  if (has("--expert-ff")) c.n_ff_exp = dims["--expert-ff"];
  if (c.arch == "mixtral") c.n_ff = c.n_ff_exp;
  if (has("--shared-ff")) c.n_ff_shexp = c.arch == "qwen2moe" ? dims["--shared-ff"] : -1;
  return c.n_expert_used <= c.n_expert && c.n_ff_shexp >= 0;
}

int run(int argc, char** argv) {
  std::string arch = "llama", dtype = "f32", out, all_dir, all_moe_dir, layout = "merged";
  uint64_t seed = 1;
  std::map<std::string, int> dims;  // shape overrides (see usage)
  const std::vector<std::string> dim_flags = {"--layers", "--dim", "--heads", "--kv-heads", "--ff", "--vocab", "--ctx",
                                              "--experts", "--experts-used", "--expert-ff", "--shared-ff"};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string val = argv[++i];
    if (arg == "--arch") arch = val;
    else if (arg == "--dtype") dtype = val;
    else if (arg == "--out") out = val;
    else if (arg == "--all") all_dir = val;
    else if (arg == "--all-moe") all_moe_dir = val;
    else if (arg == "--expert-layout") layout = val;
    else if (arg == "--seed") seed = std::strtoull(val.c_str(), nullptr, 10);
    else if (std::find(dim_flags.begin(), dim_flags.end(), arg) != dim_flags.end()) {
      const int v = std::atoi(val.c_str());
      if (v <= 0) return usage();
      dims[arg] = v;
    } else return usage();
  }
  if (layout != "merged" && layout != "split") return usage();
  std::vector<std::pair<std::string, std::string>> jobs;  // (arch, dtype), written to paths[k]
  std::vector<std::string> paths;
  auto add_all = [&](const std::string& dir, std::initializer_list<const char*> archs) {
    for (const char* a : archs)
      for (const char* t : {"f32", "f16", "q8_0", "q4_0", "q4_1"}) {
        jobs.emplace_back(a, t);
        paths.push_back(dir + "/tiny-" + a + "-" + t + ".gguf");
      }
  };
  if (!all_dir.empty()) add_all(all_dir, {"llama", "qwen3"});
  if (!all_moe_dir.empty()) add_all(all_moe_dir, {"mixtral", "qwen2moe", "qwen3moe", "olmoe"});
  if (jobs.empty()) {
    if (out.empty()) return usage();
    jobs.emplace_back(arch, dtype);
    paths.push_back(out);
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    if (!known_arch(jobs[k].first)) return usage();
    auto dt = dtype_from_name(jobs[k].second);
    const bool supported = dt && (*dt == DType::kF32 || *dt == DType::kF16 ||
                                  *dt == DType::kQ8_0 || *dt == DType::kQ4_0 ||
                                  *dt == DType::kQ4_1);
    if (!supported) return usage();
    Config c = config_for(jobs[k].first);
    c.dtype = *dt;
    c.seed = seed;
    c.split_experts = layout == "split";
    if (!apply_dims(dims, c)) return usage();
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

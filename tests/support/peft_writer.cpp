#include "tests/support/peft_writer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

namespace tessera::testing {

// adapter_config.json and an F32 adapter_model.safetensors, as PEFT saves them.
void write_peft_adapter(const std::string& dir, int r, double alpha, bool rslora,
                        const std::vector<std::string>& targets, const std::vector<StTensor>& tensors) {
  std::filesystem::create_directories(dir);
  std::string cfg = R"({"peft_type": "LORA", "r": )" + std::to_string(r) + R"(, "lora_alpha": )" +
                    std::to_string(alpha) + R"(, "use_rslora": )" + (rslora ? "true" : "false") +
                    R"(, "bias": "none", "target_modules": [)";
  for (size_t i = 0; i < targets.size(); ++i) cfg += (i ? ", \"" : "\"") + targets[i] + "\"";
  std::ofstream(dir + "/adapter_config.json") << cfg << "]}";
  std::string header = "{";
  size_t offset = 0;
  for (const StTensor& t : tensors) {
    const size_t bytes = t.data.size() * 4;
    header += (offset ? ",\"" : "\"") + t.name + R"(":{"dtype":"F32","shape":[)" + std::to_string(t.rows) + "," +
              std::to_string(t.cols) + R"(],"data_offsets":[)" + std::to_string(offset) + "," +
              std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  std::ofstream f(dir + "/adapter_model.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(header.data(), std::streamsize(header.size()));
  for (const StTensor& t : tensors)
    f.write(reinterpret_cast<const char*>(t.data.data()), std::streamsize(t.data.size() * 4));
}

// Random lora_A [r, K] ~ U(-1, 1) / sqrt(K) and lora_B [N, r] ~ U(-1, 1) / sqrt(r) (PEFT starts B
// at zero; random here so that the delta shows) for |modules| of every layer.
std::vector<StTensor> random_peft_adapter(const ModelConfig& c, int r, const std::vector<std::string>& modules,
                                          uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t D = c.n_embd, Q = int64_t(c.n_heads) * c.head_dim, KV = int64_t(c.n_kv_heads) * c.head_dim;
  std::vector<StTensor> out;
  for (int l = 0; l < c.n_layers; ++l)
    for (const std::string& m : modules) {
      int64_t N = D, K = D;
      if (m == "self_attn.q_proj") N = Q;
      if (m == "self_attn.k_proj" || m == "self_attn.v_proj") N = KV;
      if (m == "self_attn.o_proj") K = Q;
      if (m == "mlp.gate_proj" || m == "mlp.up_proj") N = c.n_ff;
      if (m == "mlp.down_proj") K = c.n_ff;
      const std::string p = "base_model.model.model.layers." + std::to_string(l) + "." + m;
      StTensor a{p + ".lora_A.weight", r, K, std::vector<float>(size_t(r * K))};
      StTensor b{p + ".lora_B.weight", N, r, std::vector<float>(size_t(N * r))};
      for (float& v : a.data) v = u(rng) / std::sqrt(float(K));
      for (float& v : b.data) v = u(rng) / std::sqrt(float(r));
      out.push_back(std::move(a));
      out.push_back(std::move(b));
    }
  return out;
}

}  // namespace tessera::testing

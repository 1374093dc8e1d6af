// `tessera quantize --calib` on tiny models: the calibration decorator collects one H per distinct
// matmul input (shared by q/k/v and gate/up), the same on the CPU and reference devices; GPTQ
// lowers the quantised model's logit error on its calibration text; without calibration the file
// is round-to-nearest byte for byte; bad calibration texts get clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "core/reference/reference.h"
#include "core/registry.h"
#include "models/gguf/gguf.h"
#include "models/model.h"
#include "models/quantize/calibrate.h"
#include "models/quantize/quantize.h"
#include "models/scoring.h"
#include "quant/fp8.h"
#include "tests/quantize/tiny_models.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Byte-level text for the tiny models' byte tokenizer: varied enough that H is full rank.
std::string calib_text() {
  std::string s;
  for (int i = 0; i < 12; ++i)
    s += "The quick brown fox " + std::to_string(i * 37) + " jumps over the lazy dog; pack my box with five dozen "
         "liquor jugs (" + std::to_string(i) + ").\n";
  return s;
}

class Calibrate : public testing::TinyModels {
 protected:
  static void SetUpTestSuite() {
    TinyModels::SetUpTestSuite();
    std::ofstream(path("calib.txt")) << calib_text();
    std::ofstream(path("empty.txt"));
  }
  static DevicePtr cpu() {
    auto d = Registry::global().find("cpu");
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    return d.ok() ? *d : nullptr;
  }
  static Result<CalibrationStats> collect(const std::string& model, DevicePtr dev) {
    CalibrationOptions co;
    co.window = 128;
    return collect_calibration(path(model), std::move(dev), path("calib.txt"), co);
  }
  Result<QuantizeStats> quantize(const std::string& in, QuantizeOptions o, const std::string& out) {
    TS_ASSIGN_OR_RETURN(auto src, open_gguf_source(path(in)));
    TS_ASSIGN_OR_RETURN(auto plan, plan_quantization(*src, o));
    return quantize_model(*src, plan, o, path(out));
  }
  static std::string bytes_of(const std::string& file) {
    std::ifstream f(path(file), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
};

TEST_F(Calibrate, OneHessianPerMatmulInputSharedByItsWeights) {
  auto stats = collect("llama.gguf", cpu());
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  const int64_t tokens = int64_t(calib_text().size()) + 1;  // bytes + BOS
  EXPECT_EQ(stats->tokens, tokens);
  EXPECT_EQ(stats->windows, int((tokens + 127) / 128));
  const Hessian* q = stats->find("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q, stats->find("blk.0.attn_k.weight"));
  EXPECT_EQ(q, stats->find("blk.0.attn_v.weight"));
  EXPECT_NE(q, stats->find("blk.1.attn_q.weight"));
  EXPECT_EQ(stats->find("blk.0.ffn_gate.weight"), stats->find("blk.0.ffn_up.weight"));
  for (const char* name : {"blk.0.attn_output.weight", "blk.0.ffn_down.weight", "output.weight"}) {
    const Hessian* h = stats->find(name);
    ASSERT_NE(h, nullptr) << name;
    EXPECT_NE(h, q) << name;
    EXPECT_EQ(h->tokens, tokens) << name;
  }
  EXPECT_EQ(stats->find("token_embd.weight"), nullptr);  // looked up, not multiplied (separate head)
  EXPECT_EQ(stats->find("blk.0.attn_norm.weight"), nullptr);
  const int64_t k = q->k;
  for (int64_t i = 0; i < k; ++i) {
    EXPECT_GT(q->h[size_t(i * k + i)], 0.0) << i;
    for (int64_t j = 0; j < i; ++j)
      ASSERT_NEAR(q->h[size_t(i * k + j)], q->h[size_t(j * k + i)], 1e-4 * std::fabs(q->h[size_t(i * k + i)]));
  }
}

TEST_F(Calibrate, CpuAndReferenceDevicesAgree) {
  auto a = collect("qwen3.gguf", cpu());
  auto b = collect("qwen3.gguf", std::make_shared<ref::ReferenceDevice>());
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(a->by_weight.size(), b->by_weight.size());
  EXPECT_NE(a->find("token_embd.weight"), nullptr);  // qwen3 ties the head to the embedding
  for (const auto& [name, h] : a->by_weight) {
    const Hessian* g = b->find(name);
    ASSERT_NE(g, nullptr) << name;
    double num = 0, den = 0;
    for (size_t i = 0; i < h->h.size(); ++i) {
      num += (h->h[i] - g->h[i]) * (h->h[i] - g->h[i]);
      den += g->h[i] * g->h[i];
    }
    EXPECT_LT(num / den, 1e-8) << name;
  }
}

TEST_F(Calibrate, GptqLowersLogitErrorOnTheCalibrationText) {
  auto stats = collect("llama.gguf", cpu());
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  QuantizeOptions o;
  o.type = DType::kQ4_0;
  o.threads = 2;
  auto rtn = quantize("llama.gguf", o, "q4_0-rtn.gguf");
  ASSERT_TRUE(rtn.ok()) << rtn.status().to_string();
  EXPECT_EQ(rtn->gptq_tensors, 0);
  o.calib = &*stats;
  auto gq = quantize("llama.gguf", o, "q4_0-gptq.gguf");
  ASSERT_TRUE(gq.ok()) << gq.status().to_string();
  EXPECT_EQ(gq->gptq_tensors, 2 * 7 + 1);  // 7 matrices per layer and output.weight; token_embd is RTN

  std::string text = calib_text();
  std::vector<int32_t> ids = {256};  // BOS, then the bytes
  for (unsigned char c : text.substr(0, 120)) ids.push_back(int32_t(c));
  auto logits = [&](const std::string& file) {
    auto m = Model::load(path(file), std::make_shared<ref::ReferenceDevice>());
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    std::vector<float> out;
    if (m.ok()) {
      EXPECT_TRUE(eval_logits(**m, ids, 64, &out, DType::kF32).ok());
    }
    return out;
  };
  const std::vector<float> base = logits("llama.gguf"), a = logits("q4_0-rtn.gguf"), b = logits("q4_0-gptq.gguf");
  ASSERT_EQ(a.size(), base.size());
  ASSERT_EQ(b.size(), base.size());
  double ea = 0, eb = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    ea += (a[i] - base[i]) * (a[i] - base[i]);
    eb += (b[i] - base[i]) * (b[i] - base[i]);
  }
  std::printf("logit squared error on the calibration text: rtn %.4g, gptq %.4g\n", ea, eb);
  EXPECT_LT(eb, 0.8 * ea);
}

TEST_F(Calibrate, WithoutCalibrationTheFileIsRoundToNearest) {
  QuantizeOptions o;
  o.type = DType::kFP8_E4M3;
  o.threads = 2;
  ASSERT_TRUE(quantize("llama.gguf", o, "fp8-plain.gguf").ok());
  CalibrationStats none;  // statistics for no weight: nothing changes either
  o.calib = &none;
  ASSERT_TRUE(quantize("llama.gguf", o, "fp8-none.gguf").ok());
  EXPECT_EQ(bytes_of("fp8-plain.gguf"), bytes_of("fp8-none.gguf"));
  // Round to nearest: every row is the reference quantiser's bytes of the source row.
  auto f = gguf::File::open(path("fp8-plain.gguf"));
  auto src = open_gguf_source(path("llama.gguf"));
  ASSERT_TRUE(f.ok() && src.ok());
  int checked = 0;
  for (size_t i = 0; i < (*src)->tensors().size(); ++i) {
    const SourceTensor& s = (*src)->tensors()[i];
    const gguf::TensorInfo* t = (*f)->find_tensor(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    if (t->dtype != DType::kFP8_E4M3) continue;
    std::vector<float> rows(size_t(s.rows() * s.cols()));
    ASSERT_TRUE((*src)->read_rows(i, 0, s.rows(), rows.data()).ok());
    const int64_t rb = dtype_row_bytes(t->dtype, s.cols());
    std::vector<uint8_t> want(size_t(rb * s.rows()));
    for (int64_t r = 0; r < s.rows(); ++r) quantize_row_fp8_e4m3(rows.data() + r * s.cols(), want.data() + r * rb, s.cols());
    EXPECT_EQ(std::memcmp((*f)->tensor_data(*t), want.data(), want.size()), 0) << s.name;
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 7);
}

TEST_F(Calibrate, BadTextsGetClearErrors) {
  auto missing = collect_calibration(path("llama.gguf"), cpu(), path("no-such.txt"), {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such.txt: cannot open the calibration text"), std::string::npos)
      << missing.status().to_string();
  auto empty = collect_calibration(path("llama.gguf"), cpu(), path("empty.txt"), {});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty.txt: the calibration text is empty"), std::string::npos)
      << empty.status().to_string();
  // The command line says the same and writes nothing.
  const std::string cmd = bin() + "/tessera quantize " + path("llama.gguf") + " " + path("cli-gptq.gguf") +
                          " --type q4_0 --calib " + path("empty.txt") + " > " + path("cli.txt") + " 2>&1";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_NE(bytes_of("cli.txt").find("the calibration text is empty"), std::string::npos) << bytes_of("cli.txt");
  EXPECT_FALSE(fs::exists(path("cli-gptq.gguf")));
}

TEST_F(Calibrate, CommandLineWritesGptqTensors) {
  const std::string cmd = bin() + "/tessera quantize " + path("llama.gguf") + " " + path("cli-gptq.gguf") +
                          " --type int8_pc --calib " + path("calib.txt") + " --calib-tokens 100 > " + path("cli.txt") +
                          " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << bytes_of("cli.txt");
  const std::string out = bytes_of("cli.txt");
  EXPECT_NE(out.find("calibration: 100 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("15 tensors with GPTQ"), std::string::npos) << out;
  auto f = gguf::File::open(path("cli-gptq.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->find_tensor("blk.1.ffn_down.weight")->dtype, DType::kINT8_PC);
}

}  // namespace
}  // namespace tessera

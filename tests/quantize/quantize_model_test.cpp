// `tessera quantize` end to end on tiny models: the written file has the planned types and the
// source's metadata (file type updated), loads, and its logits stay close to the f32 model's;
// bad inputs and outputs get clear errors and leave no file behind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/reference/reference.h"
#include "models/gguf/gguf.h"
#include "models/model.h"
#include "models/quantize/quantize.h"
#include "models/scoring.h"
#include "tests/quantize/tiny_models.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

const std::vector<int32_t> kTokens = {256, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100, 33, 10, 84};

class QuantizeModel : public testing::TinyModels {
 protected:
  Result<std::vector<TensorPlan>> quantize(const std::string& in, const QuantizeOptions& o, const std::string& out) {
    TS_ASSIGN_OR_RETURN(auto src, open_gguf_source(path(in)));
    TS_ASSIGN_OR_RETURN(auto plan, plan_quantization(*src, o));
    TS_ASSIGN_OR_RETURN(auto stats, quantize_model(*src, plan, o, path(out)));
    EXPECT_EQ(stats.bytes_out, int64_t(fs::file_size(path(out))));
    return plan;
  }
  static std::vector<float> logits_of(const std::string& file) {
    auto m = Model::load(path(file), std::make_shared<ref::ReferenceDevice>());
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    std::vector<float> logits;
    if (!m.ok()) return logits;
    const Status s = eval_logits(**m, kTokens, 8, &logits, DType::kF32);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return logits;
  }
  static double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
      den += double(ref[i]) * ref[i];
    }
    return num / den;
  }
};

struct Case {
  const char* model;
  DType type;
  double max_nmse;  // of the logits against the f32 model's
};

TEST_F(QuantizeModel, EveryFormatLoadsWithPlannedTypesAndCloseLogits) {
  const std::vector<float> base_llama = logits_of("llama.gguf"), base_wide = logits_of("wide.gguf");
  // Bounds about 2-3x the NMSE measured with seed 1 (f16 2.9e-7 ... mxfp4 4.3e-2): loose enough
  // for rounding differences, tight enough that a wrong layout (NMSE ~1) or a format one class
  // worse fails.
  const std::vector<Case> cases = {
      {"llama.gguf", DType::kF16, 1e-6},       {"llama.gguf", DType::kBF16, 5e-5},
      {"llama.gguf", DType::kQ8_0, 5e-4},      {"llama.gguf", DType::kINT8_PC, 6e-4},
      {"llama.gguf", DType::kFP8_E4M3, 1e-2},  {"llama.gguf", DType::kFP8_E5M2, 4e-2},
      {"llama.gguf", DType::kQ5_1, 1.2e-2},    {"llama.gguf", DType::kQ4_0, 5e-2},
      {"llama.gguf", DType::kINT4_G32, 5e-2},  {"llama.gguf", DType::kMXFP4, 1e-1},
      {"llama.gguf", DType::kNVFP4, 7e-2},     {"wide.gguf", DType::kQ4_K, 5e-2},
      {"wide.gguf", DType::kQ6_K, 4e-3},       {"wide.gguf", DType::kINT4_G128, 8e-2},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.model) + " -> " + dtype_name(c.type));
    QuantizeOptions o;
    o.type = c.type;
    o.threads = 2;
    const std::string out = std::string("out-") + dtype_name(c.type) + ".gguf";
    auto plan = quantize(c.model, o, out);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    auto f = gguf::File::open(path(out));
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_EQ((*f)->tensors().size(), plan->size());
    int in_target = 0;
    for (const TensorPlan& p : *plan) {
      const gguf::TensorInfo* t = (*f)->find_tensor(p.name);
      ASSERT_NE(t, nullptr) << p.name;
      EXPECT_EQ(t->dtype, p.to) << p.name;
      EXPECT_EQ(int64_t(t->nbytes), p.out_bytes) << p.name;
      in_target += p.to == c.type;
    }
    EXPECT_GE(in_target, 14) << "the 14 block matrices take the target type";
    const std::vector<float> logits = logits_of(out);
    const auto& base = std::string(c.model) == "wide.gguf" ? base_wide : base_llama;
    ASSERT_EQ(logits.size(), base.size());
    const double e = nmse(logits, base);
    EXPECT_LT(e, c.max_nmse);
    EXPECT_GT(e, 0.0) << "a lossy format changed nothing: was it really applied?";
  }
}

TEST_F(QuantizeModel, MetadataIsCopiedAndTheFileTypeUpdated) {
  QuantizeOptions o;
  o.type = DType::kQ4_1;
  ASSERT_TRUE(quantize("qwen3.gguf", o, "meta.gguf").ok());
  auto src = gguf::File::open(path("qwen3.gguf"));
  auto out = gguf::File::open(path("meta.gguf"));
  ASSERT_TRUE(src.ok() && out.ok());
  for (const auto& [key, value] : (*src)->metadata()) {
    if (key == "general.file_type") continue;
    const gguf::Value* v = (*out)->find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_TRUE(*v == value) << key;
  }
  EXPECT_EQ(*(*out)->get_int("general.file_type"), 3);  // LLAMA_FTYPE_MOSTLY_Q4_1
  EXPECT_EQ(*(*out)->get_int("general.quantization_version"), 2);
  // A private format has no LLAMA_FTYPE: the key is dropped rather than left stale.
  o.type = DType::kINT4_G32;
  ASSERT_TRUE(quantize("qwen3.gguf", o, "meta-int4.gguf").ok());
  auto int4 = gguf::File::open(path("meta-int4.gguf"));
  ASSERT_TRUE(int4.ok());
  EXPECT_EQ((*int4)->find("general.file_type"), nullptr);
}

TEST_F(QuantizeModel, RequantizingTheSameFormatCopiesBytes) {
  QuantizeOptions o;
  o.type = DType::kQ4_0;
  ASSERT_TRUE(quantize("llama.gguf", o, "a.gguf").ok());
  ASSERT_TRUE(quantize("a.gguf", o, "b.gguf").ok());
  auto a = gguf::File::open(path("a.gguf"));
  auto b = gguf::File::open(path("b.gguf"));
  ASSERT_TRUE(a.ok() && b.ok());
  for (const auto& t : (*a)->tensors()) {
    const gguf::TensorInfo* u = (*b)->find_tensor(t.name);
    ASSERT_NE(u, nullptr);
    ASSERT_EQ(u->nbytes, t.nbytes);
    EXPECT_EQ(std::memcmp((*a)->tensor_data(t), (*b)->tensor_data(*u), t.nbytes), 0) << t.name;
  }
}

TEST_F(QuantizeModel, BadInputsAndOutputsAreClearErrors) {
  QuantizeOptions o;
  o.type = DType::kQ8_0;
  {  // not a GGUF file
    std::ofstream(path("junk.gguf")) << "this is not a model";
    auto src = open_gguf_source(path("junk.gguf"));
    ASSERT_FALSE(src.ok());
    EXPECT_NE(src.status().message().find("junk.gguf"), std::string::npos) << src.status().to_string();
  }
  auto src = open_gguf_source(path("llama.gguf"));
  ASSERT_TRUE(src.ok());
  auto plan = plan_quantization(**src, o);
  ASSERT_TRUE(plan.ok());
  {  // an output folder that does not exist
    auto r = quantize_model(**src, *plan, o, path("no/such/dir/out.gguf"));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("cannot create"), std::string::npos) << r.status().to_string();
  }
  {  // the input itself
    auto r = quantize_model(**src, *plan, o, path("llama.gguf"));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("is the input file"), std::string::npos) << r.status().to_string();
  }
  {  // a non-finite weight names the tensor and row; no output (nor .part) is left behind
    gguf::Writer w;
    w.add_string("general.architecture", "llama");
    std::vector<float> v(4 * 32, 0.5f);
    v[2 * 32 + 7] = std::nanf("");
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight", DType::kF32, {4, 32}, v.data(), v.size() * 4).ok());
    ASSERT_TRUE(w.write(path("nan.gguf")).ok());
    auto nan_src = open_gguf_source(path("nan.gguf"));
    ASSERT_TRUE(nan_src.ok());
    auto nan_plan = plan_quantization(**nan_src, o);
    ASSERT_TRUE(nan_plan.ok());
    auto r = quantize_model(**nan_src, *nan_plan, o, path("nan-q8.gguf"));
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("tensor 'blk.0.attn_q.weight': row 2, column 7"), std::string::npos)
        << r.status().to_string();
    EXPECT_FALSE(fs::exists(path("nan-q8.gguf")));
    EXPECT_FALSE(fs::exists(path("nan-q8.gguf.part")));
  }
}

TEST_F(QuantizeModel, CommandLine) {
  const std::string tessera = bin() + "/tessera";
  auto run = [&](const std::string& args) {
    const int rc = std::system((tessera + " quantize " + args + " > " + path("cli.txt") + " 2>&1").c_str());
    std::ifstream f(path("cli.txt"));
    std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return std::make_pair(WEXITSTATUS(rc), out);
  };
  auto [rc, out] = run(path("llama.gguf") + " --type q4_k --dry-run");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("blk.0.attn_q.weight"), std::string::npos) << out;
  EXPECT_NE(out.find("(blk.0.attn_q.weight, ...): row of 64 is not a multiple of q4_k's block of 256, using q5_0"),
            std::string::npos)
      << out;
  EXPECT_FALSE(fs::exists(path("q4_k.gguf")));
  std::tie(rc, out) = run(path("llama.gguf") + " " + path("cli-q8.gguf") + " --type Q8_0 --rule 'ffn_down=q4_0' -q");
  EXPECT_EQ(rc, 0) << out;
  auto f = gguf::File::open(path("cli-q8.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->find_tensor("blk.1.ffn_down.weight")->dtype, DType::kQ4_0);
  EXPECT_EQ((*f)->find_tensor("blk.1.ffn_up.weight")->dtype, DType::kQ8_0);
  std::tie(rc, out) = run(path("llama.gguf") + " " + path("x.gguf") + " --type q3_k");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown weight type 'q3_k'"), std::string::npos) << out;
  std::tie(rc, out) = run(path("missing.gguf") + " " + path("x.gguf") + " --type q8_0");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("missing.gguf"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera

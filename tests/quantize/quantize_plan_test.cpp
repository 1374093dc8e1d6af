// The per-tensor rules of `tessera quantize` on tiny models: norms stay f32, the embedding and
// output head get the higher type, rows that do not fit a block fall back (and say so), user
// rules override; bad types and rules get clear errors.
#include <gtest/gtest.h>

#include <map>

#include "models/quantize/quantize.h"
#include "tests/quantize/tiny_models.h"

namespace tessera {
namespace {

class QuantizePlan : public testing::TinyModels {
 protected:
  std::map<std::string, TensorPlan> plan_of(const std::string& model, const QuantizeOptions& o) {
    auto src = open_gguf_source(path(model));
    EXPECT_TRUE(src.ok()) << src.status().to_string();
    auto plan = plan_quantization(**src, o);
    EXPECT_TRUE(plan.ok()) << plan.status().to_string();
    std::map<std::string, TensorPlan> by_name;
    for (auto& p : *plan) by_name[p.name] = p;
    return by_name;
  }
};

TEST_F(QuantizePlan, LlamaMixFollowsTheRules) {
  QuantizeOptions o;
  o.type = DType::kQ4_0;
  auto plan = plan_of("llama.gguf", o);
  ASSERT_EQ(plan.size(), 21u);  // embd, 2 x 9, output_norm, output
  EXPECT_EQ(plan["blk.0.attn_norm.weight"].to, DType::kF32);
  EXPECT_EQ(plan["output_norm.weight"].to, DType::kF32);
  EXPECT_EQ(plan["token_embd.weight"].to, DType::kQ8_0);
  EXPECT_EQ(plan["token_embd.weight"].reason, "token embedding");
  EXPECT_EQ(plan["output.weight"].to, DType::kQ8_0);
  for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
    const TensorPlan& p = plan["blk.1." + std::string(t) + ".weight"];
    EXPECT_EQ(p.to, DType::kQ4_0) << p.name;
    EXPECT_TRUE(p.fallback.empty()) << p.name;
    EXPECT_EQ(p.out_bytes, dtype_row_bytes(DType::kQ4_0, p.shape.back()) * p.shape[0]) << p.name;
  }
}

TEST_F(QuantizePlan, EightBitTargetsKeepEmbeddingsAtTheTarget) {
  QuantizeOptions o;
  o.type = DType::kINT8_PC;
  auto plan = plan_of("llama.gguf", o);
  EXPECT_EQ(plan["token_embd.weight"].to, DType::kINT8_PC);
  EXPECT_EQ(plan["output.weight"].to, DType::kINT8_PC);
  // FP8 keeps them in f16, as FP8 checkpoints keep embed_tokens and lm_head in 16 bits.
  o.type = DType::kFP8_E4M3;
  plan = plan_of("llama.gguf", o);
  EXPECT_EQ(plan["token_embd.weight"].to, DType::kF16);
  EXPECT_EQ(plan["output.weight"].to, DType::kF16);
  EXPECT_EQ(plan["blk.0.attn_q.weight"].to, DType::kFP8_E4M3);
  o.embed_type = DType::kF16;
  o.output_type = DType::kQ6_K;  // 64-wide rows: falls back to q8_0
  plan = plan_of("llama.gguf", o);
  EXPECT_EQ(plan["token_embd.weight"].to, DType::kF16);
  EXPECT_EQ(plan["output.weight"].wanted, DType::kQ6_K);
  EXPECT_EQ(plan["output.weight"].to, DType::kQ8_0);
}

TEST_F(QuantizePlan, TiedEmbeddingTakesTheOutputType) {
  QuantizeOptions o;
  o.type = DType::kQ4_1;
  o.embed_type = DType::kQ4_0;
  o.output_type = DType::kF16;
  auto plan = plan_of("qwen3.gguf", o);
  EXPECT_EQ(plan.count("output.weight"), 0u);
  EXPECT_EQ(plan["token_embd.weight"].to, DType::kF16);
  EXPECT_NE(plan["token_embd.weight"].reason.find("tied"), std::string::npos);
  EXPECT_EQ(plan["blk.0.attn_q_norm.weight"].to, DType::kF32);
}

TEST_F(QuantizePlan, RowsThatDoNotFitFallBackAndSaySo) {
  QuantizeOptions o;
  o.type = DType::kQ4_K;
  auto narrow = plan_of("llama.gguf", o);  // rows of 64 and 128
  const TensorPlan& q = narrow["blk.0.attn_q.weight"];
  EXPECT_EQ(q.wanted, DType::kQ4_K);
  EXPECT_EQ(q.to, DType::kQ5_0);
  EXPECT_NE(q.fallback.find("row of 64 is not a multiple of q4_k's block of 256"), std::string::npos) << q.fallback;
  auto wide = plan_of("wide.gguf", o);  // rows of 256 and 512
  EXPECT_EQ(wide["blk.0.attn_q.weight"].to, DType::kQ4_K);
  EXPECT_EQ(wide["blk.0.ffn_down.weight"].to, DType::kQ4_K);
  EXPECT_TRUE(wide["blk.0.ffn_down.weight"].fallback.empty());

  o.type = DType::kINT4_G128;  // rows of 64 take int4_g64
  narrow = plan_of("llama.gguf", o);
  EXPECT_EQ(narrow["blk.0.attn_q.weight"].to, DType::kINT4_G64);
  EXPECT_EQ(narrow["blk.0.ffn_down.weight"].to, DType::kINT4_G128);  // K = 128 fits
}

TEST_F(QuantizePlan, UserRulesOverrideInOrder) {
  QuantizeOptions o;
  o.type = DType::kQ4_0;
  for (const char* r : {"attn_v=q8_0", "blk\\.1\\..*=Q5_1", ".*=int8_pc", "norm=f16"}) {
    auto rule = parse_quant_rule(r);
    ASSERT_TRUE(rule.ok()) << rule.status().to_string();
    o.rules.push_back(*rule);
  }
  auto plan = plan_of("llama.gguf", o);
  EXPECT_EQ(plan["blk.0.attn_v.weight"].to, DType::kQ8_0);
  EXPECT_EQ(plan["blk.1.attn_v.weight"].to, DType::kQ8_0);  // the first matching rule wins
  EXPECT_EQ(plan["blk.1.attn_q.weight"].to, DType::kQ5_1);
  EXPECT_EQ(plan["blk.0.attn_q.weight"].to, DType::kINT8_PC);
  EXPECT_EQ(plan["token_embd.weight"].to, DType::kINT8_PC);
  // A block-format rule skips 1-D tensors; a float rule applies to them.
  EXPECT_EQ(plan["blk.0.attn_norm.weight"].to, DType::kF16);
  EXPECT_EQ(plan["blk.0.attn_norm.weight"].reason, "rule 'norm=f16'");
}

TEST(QuantizeOptionsParse, BadTypesAndRulesAreClear) {
  auto t = parse_weight_type("q3_k");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("unknown weight type 'q3_k'"), std::string::npos) << t.status().to_string();
  EXPECT_NE(t.status().message().find("nvfp4"), std::string::npos);  // lists the valid names
  EXPECT_FALSE(parse_weight_type("i32").ok());                       // not a weight format
  EXPECT_EQ(*parse_weight_type("Q4_K"), DType::kQ4_K);
  for (const char* bad : {"attn_v", "=q8_0", "attn_v=", "attn_v=q9_0", "attn_[v=q8_0"}) {
    auto r = parse_quant_rule(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(std::string("rule '") + bad + "'"), std::string::npos) << r.status().to_string();
  }
  auto eq = parse_quant_rule("a=b=q8_0");  // the last '=' splits
  ASSERT_TRUE(eq.ok());
  EXPECT_EQ(eq->dtype, DType::kQ8_0);
  EXPECT_TRUE(std::regex_search("xa=by", eq->pattern));
}

TEST(QuantizeOptionsParse, FallbackChainsEndInATypeThatAlwaysFits) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType t = dtype_table()[i].dtype;
    const auto chain = fallback_types(t);
    ASSERT_FALSE(chain.empty()) << dtype_name(t);
    EXPECT_EQ(dtype_traits(chain.back()).block_elems, 1) << dtype_name(t);
    for (DType f : chain) EXPECT_LE(dtype_traits(f).block_elems, std::max<int64_t>(1, dtype_traits(t).block_elems));
  }
  EXPECT_EQ(default_high_type(DType::kQ4_K), DType::kQ8_0);
  EXPECT_EQ(default_high_type(DType::kINT8_PC), DType::kINT8_PC);
  EXPECT_EQ(default_high_type(DType::kBF16), DType::kBF16);
  EXPECT_EQ(default_high_type(DType::kFP8_E4M3), DType::kF16);  // as FP8 checkpoints keep lm_head
  EXPECT_EQ(default_high_type(DType::kFP8_E5M2), DType::kF16);
}

}  // namespace
}  // namespace tessera

// KL divergence against a saved baseline: a model against itself gives exactly 0 and full top-1
// agreement, a quantised (perturbed) model gives more; a baseline from another text, window or
// vocabulary, or a damaged file, is refused with a message naming what differs.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/reference/reference.h"
#include "models/model.h"
#include "models/quantize/logit_file.h"
#include "models/quantize/quantize.h"
#include "models/scoring.h"
#include "tests/quantize/tiny_models.h"

namespace tessera {
namespace {

constexpr int kWindow = 32;

std::vector<int32_t> text_tokens() {  // 3 windows of bytes with some structure
  std::vector<int32_t> t;
  const std::string s = "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age "
                        "of foolishness, it was the epoch of belief.";
  for (unsigned char c : s) t.push_back(int32_t(c));
  t.resize(3 * kWindow);
  return t;
}

LogitRunInfo run_info(const std::vector<int32_t>& toks, uint32_t vocab) {
  LogitRunInfo r;
  r.vocab = vocab;
  r.window = kWindow;
  r.n_tokens = toks.size();
  r.n_scored = uint64_t(perplexity_scored_positions(int64_t(toks.size()), kWindow));
  r.text_hash = 42;
  r.tokens_hash = fnv1a64(toks.data(), toks.size() * 4);
  return r;
}

class KlDivergence : public testing::TinyModels {
 protected:
  // Scores |model| on the text; writes a baseline to |save| and/or compares against |base|.
  static Result<PerplexityResult> score(const std::string& model, const std::string& save, LogitReader* base,
                                        KlAccumulator* kl) {
    TS_ASSIGN_OR_RETURN(auto m, Model::load(path(model), std::make_shared<ref::ReferenceDevice>()));
    const auto toks = text_tokens();
    const LogitRunInfo info = run_info(toks, uint32_t(m->vocab_size()));
    std::unique_ptr<LogitWriter> w;
    if (!save.empty()) {
      TS_ASSIGN_OR_RETURN(w, LogitWriter::create(save, info));
    }
    std::vector<float> row;
    auto on_row = [&](const float* logits, int32_t) -> Status {
      if (w) {
        TS_RETURN_IF_ERROR(w->add_row(logits));
      }
      if (base) {
        TS_RETURN_IF_ERROR(base->next_row(&row));
        kl->add(row.data(), logits, info.vocab);
      }
      return OkStatus();
    };
    TS_ASSIGN_OR_RETURN(auto r, perplexity(*m, toks, kWindow, nullptr, on_row));
    if (w) {
      TS_RETURN_IF_ERROR(w->finish(r.mean_nll));
    }
    return r;
  }
};

TEST_F(KlDivergence, SelfIsZeroAndAPerturbedModelIsNot) {
  const std::string base_file = path("base.bin");
  auto base_run = score("llama.gguf", base_file, nullptr, nullptr);
  ASSERT_TRUE(base_run.ok()) << base_run.status().to_string();
  EXPECT_EQ(base_run->scored_tokens, 3 * (kWindow - 1 - kWindow / 2));

  auto base = LogitReader::open(base_file);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  EXPECT_DOUBLE_EQ((*base)->mean_nll(), base_run->mean_nll);
  KlAccumulator self;
  auto again = score("llama.gguf", "", base->get(), &self);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(self.count(), base_run->scored_tokens);
  EXPECT_EQ(self.mean(), 0.0);
  EXPECT_EQ(self.max(), 0.0);
  EXPECT_EQ(self.top1_agreement(), 1.0);

  QuantizeOptions o;
  o.type = DType::kQ4_0;
  o.embed_type = o.output_type = DType::kQ4_0;
  auto src = open_gguf_source(path("llama.gguf"));
  ASSERT_TRUE(src.ok());
  auto plan = plan_quantization(**src, o);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(quantize_model(**src, *plan, o, path("q4.gguf")).ok());
  auto base2 = LogitReader::open(base_file);
  ASSERT_TRUE(base2.ok());
  KlAccumulator q4;
  auto q4_run = score("q4.gguf", "", base2->get(), &q4);
  ASSERT_TRUE(q4_run.ok()) << q4_run.status().to_string();
  EXPECT_GT(q4.mean(), 1e-5);
  EXPECT_GE(q4.max(), q4.quantile(0.99));
  EXPECT_GE(q4.quantile(0.99), q4.quantile(0.5));
  EXPECT_LE(q4.top1_agreement(), 1.0);
  EXPECT_GT(q4.top1_agreement(), 0.5);
  EXPECT_NE(q4_run->mean_nll, base_run->mean_nll);
}

TEST(KlAccumulatorMath, MatchesAHandComputedPair) {
  // p = softmax(0, ln 3) = (1/4, 3/4); q = (1/2, 1/2): KL = 1/4 ln(1/2) + 3/4 ln(3/2).
  const float base_lp[2] = {float(std::log(0.25)), float(std::log(0.75))};
  const float logits[2] = {5.0f, 5.0f};
  KlAccumulator k;
  k.add(base_lp, logits, 2);
  EXPECT_NEAR(k.mean(), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_EQ(k.top1_agreement(), 0.0);  // argmax 1 vs a tie resolved to 0
}

TEST(LogitFile, MismatchedOrDamagedBaselinesAreRefused) {
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/kl_base_test.bin";
  const auto toks = text_tokens();
  const LogitRunInfo info = run_info(toks, 8);
  {
    auto w = LogitWriter::create(file, info);
    ASSERT_TRUE(w.ok());
    std::vector<float> logits(8);
    for (uint64_t r = 0; r < info.n_scored; ++r) {
      for (int i = 0; i < 8; ++i) logits[size_t(i)] = float((i * 7 + int(r)) % 5) - 2.0f;
      ASSERT_TRUE((*w)->add_row(logits.data()).ok());
    }
    EXPECT_FALSE((*w)->add_row(logits.data()).ok());  // one row too many
    ASSERT_TRUE((*w)->finish(1.5).ok());
  }
  auto r = LogitReader::open(file);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE((*r)->check_matches(info).ok());
  LogitRunInfo other = info;
  other.vocab = 9;
  other.text_hash = 43;
  Status s = (*r)->check_matches(other);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("vocab 8 in the baseline, 9 now"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("text hash"), std::string::npos) << s.to_string();
  other = info;
  other.n_tokens += 1;
  EXPECT_NE((*r)->check_matches(other).message().find("token count"), std::string::npos);

  // Truncated: the size no longer matches the header.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 4);
  auto t = LogitReader::open(file);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("header announces"), std::string::npos) << t.status().to_string();
  // Not a logit file at all.
  std::ofstream(file, std::ios::trunc) << std::string(100, 'x');
  auto j = LogitReader::open(file);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("bad magic"), std::string::npos);
  // Never finished (the writer died mid-run).
  {
    auto w = LogitWriter::create(file, info);
    ASSERT_TRUE(w.ok());
  }
  auto u = LogitReader::open(file);
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("not finished"), std::string::npos) << u.status().to_string();
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace tessera

// The serving core over a real (tiny, random-weight) model on the CPU: prefix-cache hits and
// copy-on-write forks must give exactly what computing everything afresh gives, since the
// model's attention reads the cached and copied K/V through the block tables.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "core/registry.h"
#include "core/sched/engine.h"
#include "models/model.h"

namespace tessera {
namespace {

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  RequestMetrics metrics;
};

class TinyModelServing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* bin = std::getenv("TESSERA_BIN");
    if (!bin) return;
    const std::filesystem::path tool = std::filesystem::path(bin) / "make_tiny_model";
    if (!std::filesystem::exists(tool)) return;
    path_ = (std::filesystem::temp_directory_path() / ("tessera_sched_tiny_" + std::to_string(::getpid()) + ".gguf")).string();
    // Head dim 32: the 8-bit KV formats need whole 32-element rows.
    const std::string cmd = tool.string() + " --arch llama --dtype f32 --dim 128 --heads 4 --kv-heads 2 --ff 256 --out " + path_ + " > /dev/null";
    if (std::system(cmd.c_str()) != 0) return;
    auto m = Model::load(path_, Registry::global().find("cpu").value());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value().release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
    if (!path_.empty()) std::filesystem::remove(path_);
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "no tiny model: TESSERA_BIN/make_tiny_model is needed (build make_tiny_model)";
  }

  // Runs |prompts| in order through one engine (so later ones may hit the prefix cache).
  static std::vector<std::map<int, Output>> run(const std::vector<std::vector<int32_t>>& prompts, bool caching, int n = 1,
                                                int max_tokens = 8, DType kv_dtype = DType::kF32) {
    auto kv = model_->create_kv_cache(1024, kv_dtype);
    EXPECT_TRUE(kv.ok());
    EngineConfig ec;
    ec.scheduler.prefix_caching = caching;
    Engine engine(*model_, **kv, model_->codec(), ec);
    std::vector<std::map<int, Output>> outs(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest r;
      r.prompt = prompts[i];
      r.sampling = SamplingParams::greedy();
      r.max_tokens = max_tokens;
      r.ignore_eos = true;
      r.n = n;
      auto* out = &outs[i];
      r.on_token = [out](const TokenEvent& ev) {
        Output& o = (*out)[ev.index];
        if (ev.token >= 0) {
          o.tokens.push_back(ev.token);
          o.logprobs.push_back(ev.logprob);
        }
        if (ev.metrics) o.metrics = *ev.metrics;
      };
      EXPECT_TRUE(engine.submit(std::move(r)).ok());
      EXPECT_TRUE(engine.run_until_idle().ok());
    }
    return outs;
  }

  static std::string path_;
  static Model* model_;
};
std::string TinyModelServing::path_;
Model* TinyModelServing::model_ = nullptr;

std::vector<int32_t> tokens(int n, int seed) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((seed * 37 + i * 11 + (i * i) % 13) % 250);
  return t;
}

TEST_F(TinyModelServing, APrefixCacheHitGivesTheSameTokensAndLogprobsAsComputingAfresh) {
  const auto shared = tokens(70, 1);  // 4 full blocks of 16 are shared
  auto a = shared, b = shared;
  a.insert(a.end(), {5, 6, 7});
  b.insert(b.end(), {9, 8, 7, 6, 5});
  const auto cached = run({a, b}, /*caching=*/true);
  const auto fresh = run({b}, /*caching=*/false);
  EXPECT_EQ(cached[1].at(0).metrics.cached_tokens, 64);
  EXPECT_EQ(fresh[0].at(0).metrics.cached_tokens, 0);
  EXPECT_EQ(cached[1].at(0).tokens, fresh[0].at(0).tokens);
  ASSERT_EQ(cached[1].at(0).logprobs.size(), fresh[0].at(0).logprobs.size());
  for (size_t i = 0; i < fresh[0].at(0).logprobs.size(); ++i)
    EXPECT_NEAR(cached[1].at(0).logprobs[i], fresh[0].at(0).logprobs[i], 1e-4) << "token " << i;
}

TEST_F(TinyModelServing, ForkedChoicesMatchASingleGreedyRun) {
  const auto p = tokens(37, 2);  // 2 full blocks + a partial one the forks share, then copy
  const auto forked = run({p}, true, /*n=*/3, 10);
  const auto single = run({p}, false, 1, 10);
  ASSERT_EQ(forked[0].size(), 3u);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(forked[0].at(c).tokens, single[0].at(0).tokens) << "choice " << c;
    for (size_t i = 0; i < single[0].at(0).logprobs.size(); ++i)
      EXPECT_NEAR(forked[0].at(c).logprobs[i], single[0].at(0).logprobs[i], 1e-4) << "choice " << c << " token " << i;
  }
}

// 8-bit KV caches (an f32 scale per token and kv head) against f16. Greedy decoding amplifies
// any difference once two logits are close, so the rule is about the common prefix: over 8
// prompts x 24 tokens, the tokens before each prompt's first divergence from f16 are >= 75% of
// all positions, and at least half of the prompts agree on all 24.
TEST_F(TinyModelServing, EightBitKvCachesGiveTheF16GreedyTokensAtMostPositions) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) prompts.push_back(tokens(9 + 7 * i, 10 + i));
  const int kTokens = 24;
  const auto want = run(prompts, false, 1, kTokens, DType::kF16);
  for (DType kv : {DType::kFP8_E4M3, DType::kINT8_PC}) {
    const auto got = run(prompts, false, 1, kTokens, kv);
    int same = 0, whole = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      const auto& a = want[p].at(0).tokens;
      const auto& b = got[p].at(0).tokens;
      ASSERT_EQ(b.size(), size_t(kTokens)) << dtype_name(kv) << " prompt " << p;
      int k = 0;
      while (k < kTokens && a[size_t(k)] == b[size_t(k)]) ++k;
      same += k;
      whole += k == kTokens;
    }
    std::printf("%s KV: %d of %d positions before the first divergence from f16; %d of 8 prompts identical\n",
                dtype_name(kv), same, 8 * kTokens, whole);
    EXPECT_GE(same, 8 * kTokens * 3 / 4) << dtype_name(kv);
    EXPECT_GE(whole, 4) << dtype_name(kv);
  }
}

}  // namespace
}  // namespace tessera

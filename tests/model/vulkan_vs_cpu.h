// Greedy decoding of a model on the Vulkan device against the CPU backend, shared by the model
// tests (smollm2_vulkan_test.cpp, gemma3_test.cpp). The rules (see smollm2_vulkan_test.cpp's file
// comment): both devices decode the same prompts together, the Vulkan model fed the CPU's tokens;
// per prompt the normalised RMS difference of the logits stays within |tol|, and where the
// argmaxes differ the CPU's margin between the two tokens is a near-tie (below 2 * tol * rms(row)).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/registry.h"
#include "models/model.h"
#include "tests/support/test_support.h"

namespace tessera::model_test {

// One decoding session of several sequences through Model::forward with its own KV blocks.
class Session {
 public:
  // |max_new|: how many tokens each sequence may grow by.
  Session(Model& m, const std::vector<std::vector<int32_t>>& prompts, DType kv_dtype, int max_new) : model_(m), seqs_(prompts) {
    size_t longest = 0;
    for (const auto& p : prompts) longest = std::max(longest, p.size());
    auto kv = m.create_kv_cache(int64_t(prompts.size()) * int64_t(longest + size_t(max_new) + 16), kv_dtype);
    EXPECT_TRUE(kv.ok()) << kv.status().to_string();
    kv_ = std::move(kv).value();
    const int bs = kv_->config().block_size;
    max_blocks_ = 0;
    for (const auto& p : prompts) max_blocks_ = std::max(max_blocks_, int32_t((p.size() + size_t(max_new) + bs - 1) / bs));
    blocks_.assign(prompts.size() * size_t(max_blocks_), 0);
    for (auto& b : blocks_) b = *kv_->pool().allocate();
    done_.assign(prompts.size(), 0);
  }

  // Runs every sequence's not yet computed tokens; returns the logits of each sequence's last
  // token, [S][V].
  std::vector<std::vector<float>> step() {
    StepPlan p;
    const int bs = kv_->config().block_size;
    p.max_blocks = max_blocks_;
    p.block_tables = blocks_;
    p.query_start.push_back(0);
    for (size_t s = 0; s < seqs_.size(); ++s) {
      for (size_t pos = done_[s]; pos < seqs_[s].size(); ++pos) {
        p.tokens.push_back(seqs_[s][pos]);
        p.positions.push_back(int32_t(pos));
        p.slot_mapping.push_back(blocks_[s * size_t(max_blocks_) + pos / size_t(bs)] * bs + int32_t(pos % size_t(bs)));
      }
      done_[s] = seqs_[s].size();
      p.query_start.push_back(int32_t(p.tokens.size()));
      p.seq_lens.push_back(int32_t(seqs_[s].size()));
      p.logit_rows.push_back(int32_t(p.tokens.size()) - 1);
    }
    std::vector<float> flat;
    const Status st = model_.forward(p, *kv_, &flat);
    EXPECT_TRUE(st.ok()) << st.to_string();
    const size_t V = size_t(model_.vocab_size());
    std::vector<std::vector<float>> rows(seqs_.size());
    for (size_t s = 0; s < seqs_.size() && flat.size() >= (s + 1) * V; ++s)
      rows[s].assign(flat.begin() + long(s * V), flat.begin() + long((s + 1) * V));
    return rows;
  }
  void append(size_t s, int32_t token) { seqs_[s].push_back(token); }

 private:
  Model& model_;
  std::vector<std::vector<int32_t>> seqs_;
  std::unique_ptr<KvCache> kv_;
  std::vector<int32_t> blocks_;
  int32_t max_blocks_ = 0;
  std::vector<size_t> done_;
};

inline int32_t argmax(const std::vector<float>& v) { return int32_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// Runs |texts| for |n_tokens| greedy steps on two loads of a model, |ref| and |test| (named
// |ref_name| and |test_name| in messages), each with a |kv_dtype| KV cache, and checks the rules of
// the file comment with |test| in the Vulkan role.
inline void expect_models_match(Model& ref_model, Model& test_model, const char* ref_name, const char* test_name,
                                const std::vector<std::string>& texts, int n_tokens, DType kv_dtype, double tol,
                                bool add_special) {
  const Tokenizer& tok = ref_model.tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& t : texts) prompts.push_back(tok.encode(t, add_special, false));
  const double kTol = tol;
  Session a(ref_model, prompts, kv_dtype, n_tokens), b(test_model, prompts, kv_dtype, n_tokens);
  std::vector<double> err(prompts.size(), 0.0), ref(prompts.size(), 0.0);
  int differences = 0;
  for (int i = 0; i < n_tokens; ++i) {
    const auto want = a.step(), got = b.step();
    ASSERT_EQ(want.size(), prompts.size());
    ASSERT_EQ(got.size(), prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
      SCOPED_TRACE("prompt " + std::to_string(s) + ", generated token " + std::to_string(i));
      ASSERT_EQ(got[s].size(), want[s].size());
      double row_sq = 0.0;
      for (size_t v = 0; v < want[s].size(); ++v) {
        ASSERT_TRUE(std::isfinite(got[s][v])) << "logit " << v;
        err[s] += (double(got[s][v]) - want[s][v]) * (double(got[s][v]) - want[s][v]);
        row_sq += double(want[s][v]) * want[s][v];
      }
      ref[s] += row_sq;
      const int32_t t_ref = argmax(want[s]), t_test = argmax(got[s]);
      if (t_test != t_ref) {
        const double margin = double(want[s][size_t(t_ref)]) - double(want[s][size_t(t_test)]);
        const double limit = 2.0 * kTol * std::sqrt(row_sq / double(want[s].size()));
        std::printf("[ info ] %s KV, prompt %zu, generated token %d: %s %d, %s %d, %s margin %.3g "
                    "(near-tie below %.3g)\n", dtype_name(kv_dtype), s, i, ref_name, t_ref, test_name, t_test, ref_name,
                    margin, limit);
        EXPECT_LT(margin, limit) << test_name << "'s greedy token " << t_test << " differs from " << ref_name << "'s "
                                 << t_ref << " and is not a near-tie";
        ++differences;
      }
      a.append(s, t_ref);
      b.append(s, t_ref);  // the reference's token: both continue on the same context
    }
  }
  for (size_t s = 0; s < prompts.size(); ++s) {
    const double nrmse = std::sqrt(err[s] / ref[s]);
    std::printf("[ info ] %s vs %s, %s KV, prompt %zu: logits nrmse %.3g over %d steps (tolerance %g)\n", test_name,
                ref_name, dtype_name(kv_dtype), s, nrmse, n_tokens, kTol);
    EXPECT_LE(nrmse, kTol) << "prompt " << s;
  }
  std::printf("[ info ] %d of %d greedy tokens differ, each at a near-tie\n", differences, n_tokens * int(prompts.size()));
}

// The Vulkan load of |path| against the CPU's.
inline void expect_vulkan_matches_cpu(const std::string& path, const std::vector<std::string>& texts, int n_tokens,
                                      DType kv_dtype = DType::kF16, double tol = 5e-2, bool add_special = false,
                                      const LoadOptions& vk_opts = {}) {
  auto vk_dev = Registry::global().find("vulkan");
  if (!vk_dev.ok()) TESSERA_SKIP_HARDWARE() << "no Vulkan device: " << vk_dev.status().to_string();
  auto cpu = Model::load(path, Registry::global().find("cpu").value());
  auto vk = Model::load(path, *vk_dev, vk_opts);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  ASSERT_TRUE(vk.ok()) << vk.status().to_string();
  expect_models_match(**cpu, **vk, "CPU", "Vulkan", texts, n_tokens, kv_dtype, tol, add_special);
}

}  // namespace tessera::model_test

// encode_step_plan / decode_step_plan (core/sched/step_plan_codec.h): a plan with every field set
// comes back equal; every truncation, and random corruptions of the words, either decode to some
// plan or fail with kDataLoss, never reading past the end (ASan builds check the latter).
#include <gtest/gtest.h>

#include <random>

#include "core/sched/step_plan_codec.h"

namespace tessera {
namespace {

StepPlan random_plan(uint32_t seed) {
  std::mt19937 rng(seed);
  auto ints = [&](size_t n) {
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = int32_t(rng() % 5000) - 7;
    return v;
  };
  auto pairs = [&](size_t n) {
    std::vector<std::pair<int32_t, int32_t>> v(n);
    for (auto& [a, b] : v) a = int32_t(rng() % 100), b = int32_t(rng() % 100);
    return v;
  };
  StepPlan p;
  p.tokens = ints(9);
  p.positions = ints(9);
  p.slot_mapping = ints(9);
  p.query_start = ints(4);
  p.seq_lens = ints(3);
  p.block_tables = ints(12);
  p.max_blocks = 4;
  p.window_slot_mapping = ints(9);
  p.window_block_tables = ints(6);
  p.window_max_blocks = 2;
  p.state_slots = ints(3);
  p.lora_slots = ints(3);
  p.lora_scales = {0.5f, -1.25f, 3.0e-7f};
  p.logit_rows = ints(3);
  p.pool_seqs = ints(1);
  p.block_copies = pairs(2);
  p.window_block_copies = pairs(1);
  p.swap_out = pairs(3);
  p.swap_in = pairs(2);
  return p;
}

void expect_same(const StepPlan& a, const StepPlan& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.positions, b.positions);
  EXPECT_EQ(a.slot_mapping, b.slot_mapping);
  EXPECT_EQ(a.query_start, b.query_start);
  EXPECT_EQ(a.seq_lens, b.seq_lens);
  EXPECT_EQ(a.block_tables, b.block_tables);
  EXPECT_EQ(a.max_blocks, b.max_blocks);
  EXPECT_EQ(a.window_slot_mapping, b.window_slot_mapping);
  EXPECT_EQ(a.window_block_tables, b.window_block_tables);
  EXPECT_EQ(a.window_max_blocks, b.window_max_blocks);
  EXPECT_EQ(a.state_slots, b.state_slots);
  EXPECT_EQ(a.lora_slots, b.lora_slots);
  EXPECT_EQ(a.lora_scales, b.lora_scales);
  EXPECT_EQ(a.logit_rows, b.logit_rows);
  EXPECT_EQ(a.pool_seqs, b.pool_seqs);
  EXPECT_EQ(a.block_copies, b.block_copies);
  EXPECT_EQ(a.window_block_copies, b.window_block_copies);
  EXPECT_EQ(a.swap_out, b.swap_out);
  EXPECT_EQ(a.swap_in, b.swap_in);
}

TEST(StepPlanCodec, EveryFieldComesBack) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const StepPlan p = random_plan(seed);
    auto back = decode_step_plan(encode_step_plan(p));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    expect_same(p, *back);
  }
  auto empty = decode_step_plan(encode_step_plan(StepPlan{}));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->n_tokens(), 0);
}

TEST(StepPlanCodec, TruncatedOrCorruptWordsAreRefused) {
  const std::vector<int32_t> words = encode_step_plan(random_plan(4));
  for (size_t n = 0; n < words.size(); ++n) {  // every strict prefix
    auto r = decode_step_plan(std::vector<int32_t>(words.begin(), words.begin() + long(n)));
    ASSERT_FALSE(r.ok()) << n << " of " << words.size() << " words";
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  }
  std::vector<int32_t> longer = words;
  longer.push_back(0);
  EXPECT_FALSE(decode_step_plan(longer).ok());  // words left over
  std::vector<int32_t> odd = encode_step_plan(StepPlan{});
  odd[odd.size() - 1] = 3;  // swap_in's count: 3 words cannot be pairs
  odd.insert(odd.end(), {1, 2, 3});
  EXPECT_FALSE(decode_step_plan(odd).ok());
  std::mt19937 rng(5);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {  // random damage: decoded or refused, never out of bounds
    std::vector<int32_t> w = words;
    for (int k = 0; k < 3; ++k) w[rng() % w.size()] = int32_t(rng()) >> int(rng() % 31);
    refused += !decode_step_plan(w).ok();
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace tessera

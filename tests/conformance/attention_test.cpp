// Conformance cases for paged attention: a varlen batch mixing decodes, a fresh prefill and a
// prefill chunk continuing a cached prefix (a long one split into query blocks); GQA; sliding window; softcap;
// f32/f16/bf16 caches and 8-bit ones (fp8_e4m3, int8_pc: an f32 scale per token and kv head); block tables in shuffled
// order; padding rows that store nothing; bidirectional (encoder) attention, where every query sees all of its
// sequence's keys; per-head sink logits (gpt-oss).
#include <algorithm>
#include <numeric>

#include "tests/conformance/conformance_test.h"

namespace tessera::conformance {

namespace {
struct AttnShape {
  const char* name;
  int64_t Hq, Hkv, D, block_size;
  std::vector<std::pair<int32_t, int32_t>> seqs;  // (tokens already cached, new tokens)
  int window;
  float softcap;
  bool pad_row;  // one extra query row with slot -1 (a padding token of sequence 0... excluded)
  bool causal = true;
  bool sinks = false;  // a per-head sink logit (gpt-oss) in [1, 6]: big enough to move every row
};

std::vector<ValueId> build_attention(CaseContext& c, const AttnShape& s, DType act, DType cache) {
  const int64_t S = int64_t(s.seqs.size());
  int64_t T = 0, max_blocks = 0, total_blocks = 0;
  for (auto [cached, fresh] : s.seqs) {
    T += fresh;
    const int64_t nb = (cached + fresh + s.block_size - 1) / s.block_size;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
  }
  const int64_t n_blocks = total_blocks + 3;  // spare blocks that nobody reads
  // A shuffled assignment of physical blocks.
  std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), c.rng());
  std::vector<int32_t> tables(size_t(S * max_blocks), 0), slots, qstart = {0}, lens;
  int64_t next = 0;
  for (int64_t si = 0; si < S; ++si) {
    const auto [cached, fresh] = s.seqs[size_t(si)];
    const int64_t nb = (cached + fresh + s.block_size - 1) / s.block_size;
    for (int64_t b = 0; b < nb; ++b) tables[size_t(si * max_blocks + b)] = perm[size_t(next++)];
    for (int32_t i = 0; i < fresh; ++i) {
      const int64_t pos = cached + i;
      slots.push_back(int32_t(tables[size_t(si * max_blocks + pos / s.block_size)] * s.block_size + pos % s.block_size));
    }
    qstart.push_back(qstart.back() + fresh);
    lens.push_back(cached + fresh);
  }
  const ValueId q = c.input(act, {T, s.Hq, s.D});
  const ValueId k = c.input(act, {T, s.Hkv, s.D});
  const ValueId v = c.input(act, {T, s.Hkv, s.D});
  const ValueId kc = c.input(cache, {n_blocks, s.block_size, s.Hkv, s.D});
  const ValueId vc = c.input(cache, {n_blocks, s.block_size, s.Hkv, s.D});
  AttentionParams p;
  p.sliding_window = s.window;
  p.softcap = s.softcap;
  p.causal = s.causal;
  const ValueId sinks = s.sinks ? c.input(DType::kF32, {s.Hq}, 1.0f, 6.0f) : kNoValue;
  const ValueId out = c.graph().attention({q, k, v, kc, vc, c.i32_values({T}, slots), c.i32_values({S + 1}, qstart),
                                           c.i32_values({S}, lens), c.i32_values({S, max_blocks}, tables), sinks},
                                          p);
  return {out, kc, vc};
}
}  // namespace

std::vector<Case> attention_cases() {
  const std::vector<AttnShape> shapes = {
      {"decode batch gqa3", 9, 3, 64, 16, {{36, 1}, {0, 1}, {15, 1}, {16, 1}}, 0, 0.0f, false},
      {"mixed prefill+decode", 4, 2, 64, 16, {{0, 20}, {40, 1}, {33, 7}}, 0, 0.0f, false},
      {"mha d128 bs8", 2, 2, 128, 8, {{5, 3}, {0, 9}}, 0, 0.0f, false},
      {"sliding window", 4, 1, 32, 16, {{50, 4}, {0, 30}}, 8, 0.0f, false},
      {"softcap", 6, 2, 64, 16, {{10, 5}}, 0, 30.0f, false},
      // Gemma 4's global layers: heads of 512, GQA, a decode beside a prefill chunk.
      {"d512 gqa2", 4, 2, 512, 16, {{20, 3}, {0, 1}}, 0, 0.0f, false},
      // A prefill chunk over a long prefix split into several query blocks (the CPU kernel's
      // items: 32 / G tokens), beside decodes, with ragged key chunks.
      {"long chunk gqa3", 9, 3, 64, 16, {{203, 23}, {70, 1}, {0, 1}}, 0, 0.0f, false},
      {"window chunk", 6, 2, 32, 16, {{90, 40}}, 20, 0.0f, false},
      // Encoders (BERT): a batch of fresh sequences, MHA, one longer than a key chunk; and keys
      // past a query's own position in a sequence with a cached part.
      {"bidirectional batch", 12, 12, 32, 16, {{0, 20}, {0, 7}, {0, 45}}, 0, 0.0f, false, false},
      {"bidirectional gqa cached", 4, 2, 64, 16, {{10, 5}, {0, 1}}, 0, 0.0f, false, false},
      // Long-context decodes (the GPU splits their keys, flash-decoding style, and merges the
      // parts): one long sequence, a shorter one whose later parts are empty, a fresh one; and
      // a sliding window that leaves most parts empty.
      {"long decode", 8, 2, 64, 16, {{1100, 1}, {700, 1}, {0, 1}}, 0, 0.0f, false},
      {"long decode window", 4, 1, 32, 16, {{900, 1}, {300, 2}}, 100, 0.0f, false},
      // Attention sinks (gpt-oss): decodes, a prefill beside decodes, a sliding window with a
      // chunked prefill, and a long decode whose keys the GPU splits (the sink joins once, at the merge).
      {"sinks decode gqa3", 9, 3, 64, 16, {{36, 1}, {0, 1}, {15, 1}}, 0, 0.0f, false, true, true},
      {"sinks prefill+decode", 4, 2, 64, 16, {{0, 20}, {40, 1}, {33, 7}}, 0, 0.0f, false, true, true},
      {"sinks window chunk", 8, 2, 64, 16, {{90, 40}, {130, 1}}, 32, 0.0f, false, true, true},
      {"sinks long decode", 8, 2, 64, 16, {{1100, 1}, {700, 1}}, 0, 0.0f, false, true, true},
  };
  std::vector<Case> cases;
  uint64_t seed = 3000;
  for (DType a : activation_dtypes())
    for (DType cache : {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8_E4M3, DType::kINT8_PC})
      for (const AttnShape& s : shapes)
        cases.push_back({std::string("attention/a=") + dtype_name(a) + "/cache=" + dtype_name(cache) + "/" + s.name,
                         OpKind::kAttention, a, cache, ++seed,
                         [=](CaseContext& c) { return build_attention(c, s, a, cache); }});
  return cases;
}

TESSERA_CONFORMANCE_SUITE(Attention, attention_cases);

}  // namespace tessera::conformance

// Conformance cases for lora, the multi-LoRA delta: segments of 1..many rows, empty segments and
// base-model rows, several adapters of different ranks zero-padded into shared slot tensors,
// ranks 8 to 64, SmolLM2's projection shapes, a strided input, f32/f16/bf16 activations and
// adapter weights.
#include "tests/conformance/conformance_test.h"

namespace tessera::conformance {

namespace {
struct LoraShape {
  const char* name;
  int64_t K, N, R;
  std::vector<int32_t> ranks;  // per slot, <= R
  std::vector<int32_t> lens;   // rows per segment (0: an empty segment)
  std::vector<int32_t> slots;  // per segment, -1: base model
  bool strided_x = false;
};

std::vector<ValueId> build_lora(CaseContext& c, const LoraShape& s, DType act, DType w) {
  std::vector<int32_t> start = {0};
  for (int32_t n : s.lens) start.push_back(start.back() + n);
  const int64_t T = start.back(), n_slots = int64_t(s.ranks.size()), G = int64_t(s.lens.size());
  std::vector<float> scales;
  for (int64_t a = 0; a < n_slots; ++a) scales.push_back(a % 2 ? 0.5f : 2.0f);
  Graph::LoraInputs in{};
  in.x = s.strided_x ? c.strided_rows(act, T, s.K, 5) : c.input(act, {T, s.K});
  in.base = c.input(act, {T, s.N});
  in.a = c.input(w, {n_slots, s.R, s.K}, -0.5f, 0.5f);
  in.b = c.input(w, {n_slots, s.R, s.N}, -0.5f, 0.5f);
  in.ranks = c.i32_values({n_slots}, s.ranks);
  in.scales = c.input_values(DType::kF32, {n_slots}, scales);
  in.seg_start = c.i32_values({G + 1}, start);
  in.seg_slot = c.i32_values({G}, s.slots);
  return {c.graph().lora(in)};
}
}  // namespace

std::vector<Case> lora_cases() {
  const std::vector<LoraShape> shapes = {
      {"decodes r16 3 slots", 96, 80, 16, {16, 8, 16}, {1, 1, 1, 1, 1}, {0, -1, 2, 1, 0}},
      {"prefill segments r32", 160, 96, 32, {32, 24}, {7, 0, 13, 1, 4}, {1, 0, -1, 1, 0}},
      {"rank 64", 128, 200, 64, {64, 64}, {3, 9}, {0, 1}},
      {"rank 8 odd dims", 33, 17, 8, {8}, {2, 0, 5}, {0, -1, 0}},
      {"base rows only", 64, 48, 8, {8, 8}, {4, 2}, {-1, -1}},
      {"empty segments", 72, 40, 16, {16, 12}, {0, 3, 0, 0, 2, 0}, {1, 0, -1, 1, 1, 0}},
      {"unused slot and rank 0", 48, 56, 16, {0, 16, 8}, {2, 3, 1}, {0, 2, -1}},
      {"strided x", 96, 64, 16, {16, 16}, {3, 4}, {1, 0}, true},
      {"smollm2 q r16", 576, 576, 16, {16, 16}, {2, 1, 3}, {0, -1, 1}},
      {"smollm2 down r16", 1536, 576, 16, {16}, {5, 1}, {0, -1}},
  };
  std::vector<Case> cases;
  uint64_t seed = 9500;
  for (DType a : activation_dtypes()) {
    const std::string at = std::string("/a=") + dtype_name(a) + "/";
    for (const LoraShape& s : shapes)
      cases.push_back({"lora" + at + s.name, OpKind::kLora, a, DType::kF32, ++seed,
                       [=](CaseContext& c) { return build_lora(c, s, a, DType::kF32); }});
  }
  for (DType w : {DType::kF16, DType::kBF16})
    for (const LoraShape& s : {shapes[1], shapes[8]})
      cases.push_back({std::string("lora/a=f32/w=") + dtype_name(w) + "/" + s.name, OpKind::kLora, DType::kF32, w,
                       ++seed, [=](CaseContext& c) { return build_lora(c, s, DType::kF32, w); }});
  return cases;
}

TESSERA_CONFORMANCE_SUITE(Lora, lora_cases);

}  // namespace tessera::conformance

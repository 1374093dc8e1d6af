// A StepPlan as int32 words and back: how a tensor-parallel rank 0 hands each step to the ranks
// that follow it (Model::follow), and the form a disaggregated prefill/decode split would send.
// Every field in a fixed order, each vector as its length then its words (pairs flattened,
// floats by their bits). decode_step_plan checks every length against what is left, so words
// from elsewhere cannot make it read out of bounds.
#pragma once
#include <cstdint>
#include <vector>

#include "core/sched/step_plan.h"
#include "core/status.h"

namespace tessera {

std::vector<int32_t> encode_step_plan(const StepPlan& plan);
// kDataLoss naming the problem when |words| is not exactly one encoded plan.
Result<StepPlan> decode_step_plan(const std::vector<int32_t>& words);

}  // namespace tessera

// Engine::Active: the engine's state of one running choice, shared by engine.cpp and
// engine_spec.cpp (not part of the Engine's interface).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/sched/engine.h"

namespace tessera {

struct Engine::Active {
  RequestId id;          // the sequence
  RequestId request;     // the user's request (== id for choice 0)
  int index = 0;         // choice index
  int forks_pending = 0; // choices still to fork from this one at its first sample
  GenerationRequest req;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<Grammar> grammar;  // this choice's matcher (a fork of req.grammar), or null
  // The grammar's mask for the next sampled token, filled while the device runs the step
  // (Engine::prepare_mask); mask_allowed < 0: not filled yet.
  std::vector<uint32_t> mask;
  int32_t mask_allowed = -1;
  // Under speculation, one mask per row of a drafted step (Engine::prepare_draft_masks): row i is
  // the grammar's state after draft[0..i). draft_allowed[i] is row i's allowed count; rows past
  // the first draft token the grammar refuses are not filled (verification never reaches them).
  std::vector<uint32_t> draft_masks;
  std::vector<int32_t> draft_allowed;
  std::chrono::steady_clock::time_point submitted, first_token, last_token;
  RequestMetrics metrics;
  std::string pending_bytes;  // bytes not yet emitted: partial UTF-8 or a possible stop prefix
};

}  // namespace tessera

// StepPlan: everything one model step needs, as plain data. The scheduler fills it; the model
// uploads it and builds the step graph from it.
#pragma once
#include <bit>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/exec/executor.h"
#include "core/sched/step_cost.h"
#include "core/status.h"

namespace tessera {

// The LoRA adapter a sequence runs under (docs/lora.md): |slot| indexes the model's adapters
// (Model::add_lora; -1: the base model) and picks the adapter's weights in a step; |id| (0: the
// base model, else > 0 and never reused for another adapter) keys the prefix cache and the KV
// events, so K/V computed under different adapters are never shared.
// |scale| multiplies the adapter's own scale (llama.cpp's per-request "scale"); an adapter at
// another scale than 1 is keyed as a variant of its own (lora_variant_id), since its K/V differ.
struct LoraRef {
  int32_t slot = -1;
  int32_t id = 0;
  float scale = 1.0f;
  bool operator==(const LoraRef&) const = default;
};

// The prefix-cache id of adapter |id| at |scale| != 1: in [2^30, 2^31), above every adapter's own
// id (those count from 1), a function of both (splitmix64 of id and the scale's bits), so the
// same scale finds its blocks again and another scale does not.
inline int32_t lora_variant_id(int32_t id, float scale) {
  const uint32_t bits = std::bit_cast<uint32_t>(scale);
  uint64_t x = (uint64_t(uint32_t(id)) << 32 | bits) + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return int32_t(0x40000000u | uint32_t(x & 0x3FFFFFFFu));
}

struct StepPlan {
  std::vector<int32_t> tokens;        // [T] token ids of every sequence's new tokens, flattened
  std::vector<int32_t> positions;     // [T] position of each token in its sequence
  std::vector<int32_t> slot_mapping;  // [T] KV slot (block * block_size + offset) for each new token
  std::vector<int32_t> query_start;   // [S+1] rows of sequence s: query_start[s] .. query_start[s+1]
  std::vector<int32_t> seq_lens;      // [S] context length of s including its new tokens
  std::vector<int32_t> block_tables;  // [S, max_blocks] row-major, unused entries 0
  int32_t max_blocks = 0;
  // The KV cache's sliding-window group (hybrid memory; all empty without one): each token's
  // slot and each sequence's table in the window pool, whose leading entries may be blocks given
  // back once they fell out of every query's window (written as 0; never read).
  std::vector<int32_t> window_slot_mapping;  // [T]
  std::vector<int32_t> window_block_tables;  // [S, window_max_blocks]
  int32_t window_max_blocks = 0;
  // Recurrent layers (hybrid models; empty without them): each sequence's live slot in the KV
  // cache's state pool (KvCache::states()), which the step reads and leaves holding the state
  // after the sequence's last token in the step.
  std::vector<int32_t> state_slots;  // [S]
  // LoRA (docs/lora.md): each sequence's adapter slot (Model::add_lora; -1: the base model).
  // Empty: every sequence runs under the model's default adapter (Model::set_default_lora). The
  // Scheduler always fills it, from each request's resolved GenerationRequest::lora.
  std::vector<int32_t> lora_slots;  // [S]
  // Each sequence's scale of its adapter (LoraRef::scale); empty: 1 for every sequence.
  std::vector<float> lora_scales;     // [S]
  std::vector<int32_t> logit_rows;    // rows of [T] whose logits are needed (in this order)
  // Sequences (indices into seq_lens) whose pooled embedding the step returns instead of logits:
  // embedding requests, each with its whole prompt in this step.
  std::vector<int32_t> pool_seqs;
  // (src, dst) KV blocks to copy before the step runs: copy-on-write of a shared partial block.
  // The engine applies them (KvCache::copy_block), so a ModelRunner never sees them.
  std::vector<std::pair<int32_t, int32_t>> block_copies;
  std::vector<std::pair<int32_t, int32_t>> window_block_copies;  // the same in the window group
  // Swap preemption, applied by the engine in this order before the step: (device block, host
  // slot) copies out, then (host slot, device block) copies in. A block swapped out may be
  // handed to another sequence in the same step, hence out before anything writes.
  std::vector<std::pair<int32_t, int32_t>> swap_out;
  std::vector<std::pair<int32_t, int32_t>> swap_in;

  int32_t n_tokens() const { return int32_t(tokens.size()); }
  int32_t n_seqs() const { return int32_t(seq_lens.size()); }
};

// What the engine needs of a model: implemented in models/ (the engine never includes them).
class KvCache;
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t context_length() const = 0;
  // Runs |plan| through the model, writing the new K/V into |kv|, and returns the logits of
  // plan.logit_rows as [R, vocab] f32 in |logits|, followed by the pooled embeddings of
  // plan.pool_seqs as [P, embedding_dim()] f32.
  virtual Status forward(const StepPlan& plan, KvCache& kv, std::vector<float>* logits) = 0;
  // forward() in two halves, so the host works while the device computes: submit() queues the
  // step (its inputs, its graph, the copy of its logits to host memory) and returns without
  // waiting; collect() waits and hands over what forward() would have. One step may be pending
  // at a time; submit() must be followed by collect() before the next submit(). The defaults run
  // forward() inside submit(), for runners with nothing to overlap.
  virtual Status submit(const StepPlan& plan, KvCache& kv) {
    submitted_ = forward(plan, kv, &submitted_logits_);
    return OkStatus();
  }
  virtual Status collect(std::vector<float>* logits) {
    logits->swap(submitted_logits_);
    return std::exchange(submitted_, OkStatus());
  }
  // The width of a pooled embedding; 0 when the model cannot embed (why_no_embeddings() says why).
  virtual int32_t embedding_dim() const { return 0; }
  virtual std::string why_no_embeddings() const { return "the model has no pooling"; }
  // False for encoders, which produce embeddings but no next-token logits.
  virtual bool generates() const { return true; }
  // A guess at the cost of a step (from the model's dimensions and the device), the starting
  // point of the scheduler's fitted step cost model. All zero: unknown (generic defaults).
  virtual StepCostCoefficients cost_prior() const { return {}; }
  // The adapter a request that names none runs under (Model::set_default_lora), and the adapter
  // in |slot| of n_loras(), as the engine keys its prefix cache with them (LoraRef::id).
  virtual int32_t n_loras() const { return 0; }
  virtual LoraRef default_lora() const { return {}; }
  virtual LoraRef lora(int32_t slot) const { return {slot, slot + 1}; }
  // The prefix-cache id of |ref|'s adapter at |scale| (not 0 or 1): lora_variant_id. Called on
  // the engine's thread; a runner that names adapters (KV events' lora_name) remembers whose
  // variant it is.
  virtual int32_t lora_variant(const LoraRef& ref, float scale) { return lora_variant_id(ref.id, scale); }
  // How many distinct adapters one step may use (the device slots, vLLM's --max-loras); 0: any
  // number. The scheduler keeps a request whose adapter would exceed it waiting.
  virtual int32_t lora_device_slots() const { return 0; }
  // Not OK once the runner cannot run steps any more (kUnavailable: a tensor-parallel rank
  // died): the engine refuses new requests with it. Called from any thread.
  virtual Status health() const { return OkStatus(); }
  // The counters of the executor that runs its steps (executables built and reused), or zeros.
  // Called on the engine thread.
  virtual ExecutorStats executor_stats() const { return {}; }

 private:
  Status submitted_;                     // the default submit()'s forward() status
  std::vector<float> submitted_logits_;  // and its outputs, until collect()
};

}  // namespace tessera

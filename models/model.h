// Model: a loaded model (weights on a device, tokenizer, chat template) that runs engine steps.
// It knows no family: its Architecture (models/arch/architecture.h, found in the registry by the
// file's architecture name) gives the config, the weights struct and the step graph.
#pragma once
#include <atomic>
#include <functional>
#include <list>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/comm/communicator.h"
#include "core/device.h"
#include "core/exec/split_graph.h"
#include "core/kv/kv_cache.h"
#include "core/planner.h"
#include "core/sched/engine.h"
#include "core/sched/step_plan.h"
#include "models/arch/architecture.h"
#include "models/arch/graph_context.h"
#include "models/arch/weights.h"
#include "models/lora/lora.h"
#include "models/model_config.h"
#include "models/placement.h"
#include "models/tokenizer/tokenizer.h"

namespace tessera {

namespace gguf { class File; }

// Expert load of a mixture-of-experts model: how many tokens each layer routed to each expert,
// summed over the forward() calls made while collection was on. Every token of a step (prefill
// chunks included) is routed to k experts in every layer, so each layer's counts sum to
// tokens * k. The shared expert (qwen2moe), which every token uses, is not counted.
struct ExpertStats {
  int n_layers = 0, n_experts = 0, k = 0;
  int64_t tokens = 0;
  std::vector<int64_t> counts;  // [n_layers, n_experts]
  int64_t at(int layer, int expert) const { return counts[size_t(layer) * size_t(n_experts) + size_t(expert)]; }
};

// A compact text table of |s|: one line per layer with a bar per expert (its share of the layer's
// routed tokens, scaled to the busiest expert) and the busiest and idlest experts' shares.
std::string expert_stats_table(const ExpertStats& s);

// Only the tokenizer (and chat template, when |chat_template| is not null) of a .gguf file or a
// Hugging Face checkpoint directory: no weights are read, so a vocab-only GGUF works.
Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path, std::string* chat_template = nullptr);

struct LoadOptions {
  // Called with (bytes done, bytes total) while weights load; return false to cancel.
  std::function<bool(size_t, size_t)> progress;
  int max_batch_tokens = 512;  // sizes the per-step input buffers
  int max_seqs = 64;
  // The activation dtype (f32, f16 or bf16); unset: the device's DeviceInfo::activation_dtype.
  std::optional<DType> activation_dtype;
  // Pad decode-only steps to a bucket of sequences (DeviceInfo::pads_decode_batches); unset: the
  // device's choice.
  std::optional<bool> pad_decode_batches;
  // A model across the main device and the CPU (--gpu-layers, --cpu-moe, --override-tensor;
  // docs/multi-device.md). Default: everything on the main device.
  PlacementOptions placement;
  // Tensor parallelism over |comm|'s ranks (size > 1; docs/multi-device.md): this process loads
  // its rank's shard of every split weight (heads, FFN rows) and KV of its share of the KV heads;
  // a step's row-parallel products are summed over the ranks. Every rank must run the same steps
  // (rank 0's submit broadcasts them to ranks in Model::follow). Null or one rank: the whole model.
  std::shared_ptr<Communicator> comm;
  // Every rank plans and submits the same steps itself (no broadcast, no followers: tests).
  bool tp_every_rank_steps = false;
};

class Model final : public ModelRunner {
 public:
  // |path|: a .gguf file, or a Hugging Face checkpoint directory (config.json, *.safetensors,
  // tokenizer.json; see models/safetensors/hf_model.h).
  static Result<std::unique_ptr<Model>> load(const std::string& path, DevicePtr device, const LoadOptions& opts = {});
  ~Model() override;

  const ModelConfig& config() const { return cfg_; }
  // The shapes this rank computes with: config() with heads and FFN widths divided by the
  // tensor-parallel degree (config() itself when there is none).
  const ModelConfig& rank_config() const { return rank_cfg_; }
  // The tensor-parallel degree and this rank (1 and 0 without LoadOptions::comm).
  int tp_size() const { return comm_ ? comm_->size() : 1; }
  int tp_rank() const { return comm_ ? comm_->rank() : 0; }
  // Tensor parallelism's driver and followers: rank 0 plans the steps (the engine, the server)
  // and its submit() broadcasts each plan; every other rank calls follow() with a KV cache made
  // as rank 0's was, which applies each plan's block copies and runs its step until rank 0 calls
  // stop_followers() (also done by the destructor). follow() waits for the next plan without a
  // deadline (an idle server), then like any collective. Swap preemption is not mirrored: a
  // tensor-parallel engine preempts by recompute.
  Status follow(KvCache& kv);
  Status stop_followers();
  const Architecture& architecture() const { return *arch_; }
  // Which memory each layer keeps between steps (full-attention KV, a window, recurrent state).
  std::vector<LayerMemory> memory_layout() const { return arch_->memory_layout(rank_cfg_); }
  DType activation_dtype() const { return act_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const std::string& chat_template() const { return chat_template_; }  // Jinja source ("" if none)
  Device& device() { return *device_; }
  // Where the weights and each layer's KV live (one device unless LoadOptions::placement split it).
  const Placement& placement() const { return *placement_; }
  // Bytes of weights on each device, main device first (one entry on a single device).
  std::vector<std::pair<const Device*, size_t>> weight_bytes_per_device() const;
  // A split model's copies between devices so far (SplitGraph::stats summed over its steps).
  const SplitStats& split_stats() const { return split_stats_; }
  // The device as shared with the caller: a second model (a speculative draft) loads onto it.
  const DevicePtr& device_ptr() const { return device_; }
  // Every loaded weight (named as in GGUF), for size and parameter counts.
  std::vector<const Tensor*> weight_tensors() const;
  // Bytes of the weight copies the device repacked into its own layout at load time
  // (Device::prepare_weight); 0 when it reads the file's layout in place.
  size_t prepared_weight_bytes() const { return prepared_bytes_; }
  // The tokenizer functions the engine needs.
  TextCodec codec() const;

  int32_t vocab_size() const override { return cfg_.n_vocab; }
  int32_t context_length() const override { return cfg_.n_ctx_train; }
  // submit() then collect().
  Status forward(const StepPlan& plan, KvCache& kv, std::vector<float>* logits) override;
  // Writes the step's inputs into a host-pinned staging slot (two, used in turn) and queues
  // their copy into the step buffer, the step's executable and the copy of its logits rows into
  // host-pinned memory: the device is never waited for here.
  Status submit(const StepPlan& plan, KvCache& kv) override;
  // Waits for the pending step and returns its logits rows (then pooled embeddings).
  Status collect(std::vector<float>* logits) override;
  // kUnavailable for good once a tensor-parallel collective failed (a rank died or stalls): the
  // engine then refuses new requests (the server answers 503). OK otherwise.
  Status health() const override;
  int32_t embedding_dim() const override { return cfg_.pooling == Pooling::kNone ? 0 : cfg_.n_embd; }
  std::string why_no_embeddings() const override;
  bool generates() const override { return !cfg_.is_encoder(); }
  // Turns on embeddings for a decoder (last-token or mean pooling of the final normed hidden
  // states; kNone turns them off). Encoders keep the pooling their files name unless changed.
  Status set_pooling(Pooling p);
  // From the weights' FLOPs and bytes and a nominal device speed (the engine refits it online).
  StepCostCoefficients cost_prior() const override;
  ExecutorStats executor_stats() const override;
  // Step graphs constructed so far (a step whose inputs match a kept graph's builds none).
  int64_t step_graphs_built() const { return step_graphs_built_; }

  // LoRA adapters (docs/lora.md). add_lora reads a PEFT adapter folder, or a llama.cpp GGUF
  // adapter when |path| is a regular file, against this model and gives it a slot (returned): the
  // first one an unloaded adapter left (remove_lora), else a new one. Its errors name the adapter
  // and what does not fit, and leave the loaded adapters as they were. Not while a step is
  // pending (submit without collect). |limits| (0: none): refuses an adapter beyond
  // limits.loaded_cap() loaded (--max-cpu-loras, else --max-loras) or of rank above max_rank;
  // limits.max_loras sets the device slots (below).
  Result<int> add_lora(const std::string& name, const std::string& path, const LoraLimits& limits = {});
  // Unloads the adapter in |slot|, leaving a hole (an adapter of name "" and id 0) that the next
  // add_lora fills: the other slots keep their numbers. Not the default adapter's slot, not while
  // a step is pending; sequences still planned under |slot| would run as the base model, so the
  // caller first makes sure none is (the engine refuses new requests for a hole).
  Status remove_lora(int slot);
  // Slot i = loras()[i]; holes included. Not thread-safe: the thread that steps the model owns it.
  const std::vector<LoraAdapter>& loras() const { return loras_; }
  // The 2-D projections an adapter may target, with their tensor names (merge_lora_to_gguf).
  const std::vector<LoraTarget>& lora_targets() const { return lora_targets_; }
  // The adapter slot every sequence of a step runs under (-1: the base model). With adapters
  // loaded, every projection an adapter targets goes through the lora op, so switching the slot
  // reuses the step graphs.
  // |scale| multiplies the adapter's own (finite; run/chat's --lora-scale).
  Status set_default_lora(int slot, float scale = 1.0f);
  int default_lora_slot() const { return default_lora_; }
  // Any thread (the engine validates requests on the caller's thread): slots, holes included.
  int32_t n_loras() const override { return n_loras_.load(std::memory_order_acquire); }
  LoraRef default_lora() const override {
    LoraRef r = lora(default_lora_);
    r.scale = default_lora_scale_;
    return r;
  }
  LoraRef lora(int32_t slot) const override {
    return {slot, slot >= 0 && slot < int32_t(loras_.size()) ? loras_[size_t(slot)].id : 0};
  }
  // Device slots (LoraSet): how many adapters one step may use, min(--max-loras of the latest
  // add_lora, slots); a step's adapters are copied into them as it needs them, the least recently
  // used making room. 0 without adapters. lora_loads(): adapters copied into a device slot so far.
  int32_t lora_device_slots() const override { return lora_set_ ? lora_set_->slots() : 0; }
  // Remembers which adapter a variant id belongs to (lora_name_of).
  int32_t lora_variant(const LoraRef& ref, float scale) override;
  // The name of the adapter whose prefix-cache id (LoraRef::id, a variant's included) is |key|,
  // "" for none or an unloaded one. The thread that steps the model (KV events are published
  // from its steps).
  std::string lora_name_of(int32_t key) const;
  int64_t lora_loads() const { return lora_set_ ? lora_set_->loads() : 0; }

  // Expert statistics (MoE models; a no-op for dense ones). Off by default: when on, each step
  // keeps the router's expert ids ([T, k] i32 per layer) alive and downloads them after compute.
  void set_collect_expert_stats(bool on);
  const ExpertStats& expert_stats() const { return expert_stats_; }
  void reset_expert_stats();

  // A KV cache for |n_tokens| tokens in total (rounded up to whole blocks). Hybrid memory, with
  // |window_memory|: the sliding-window layers (memory_layout) get a pool of their own that
  // holds each running sequence's window rather than the context; the engine's scheduler fills
  // its tables (a hand-made StepPlan does not: such callers keep it off, and every layer then
  // keeps every token, as llama.cpp's --swa-full).
  Result<std::unique_ptr<KvCache>> create_kv_cache(int64_t n_tokens, DType dtype = DType::kF16, int block_size = 16,
                                                   bool window_memory = false);

 private:
  Model() = default;
  // A loader's tensors: nullopt when absent, else the tensor in exactly |spec|'s shape; a stored
  // shape that differs is the getter's error, naming the file (gguf_tensor, safetensors::Weights).
  using TensorGetter = std::function<Result<std::optional<HostTensor>>(const TensorSpec&)>;
  static Result<std::unique_ptr<Model>> load_checkpoint(const std::string& dir, DevicePtr device, const LoadOptions& opts);
  Status finish_load(const std::string& path, const TensorGetter& get, const LoadOptions& opts);
  // Tensor parallelism (models/tensor_parallel.cpp): rank_cfg_ and comm_ for |comm|'s degree,
  // checked against the architecture and its head counts and widths; then this rank's part of
  // weight |name| split along |dim| (TensorSpec::tp_dim), in new memory.
  Status set_tensor_parallel(std::shared_ptr<Communicator> comm);
  Result<HostTensor> shard_weight(const HostTensor& h, int dim, const std::string& name) const;
  // Rank 0's submit: every step's plan to the other ranks (tensor_parallel.cpp).
  Status broadcast_step(const StepPlan& plan);
  // submit() and collect() themselves; the public ones add the tensor-parallel failure rule.
  Status submit_step(const StepPlan& plan, KvCache& kv);
  Status collect_step(std::vector<float>* logits);
  Status note_tp_failure(Status s);
  mutable std::mutex tp_failure_mutex_;
  Status tp_failure_;               // the first failed collective's status (health())
  bool followers_stopped_ = false;  // or none follow (LoadOptions::tp_every_rank_steps)
  Status load_weights(const std::string& path, const TensorGetter& get, const LoadOptions& opts);
  // PlacementOptions::kFitLayers resolved from the weights' sizes (name, bytes) and the budget.
  Result<Placement> fit_placement(const PlacementOptions& o, const std::vector<std::pair<std::string, size_t>>& sizes);
  static Result<std::optional<HostTensor>> gguf_tensor(const gguf::File& f, const TensorSpec& s);
  Result<Tensor> bind_weight(Device& dev, const HostTensor& h, const std::string& name, const BufferPtr& mapped);
  Result<Tensor> prepare_weight(Device& dev, Tensor t, const TensorSpec& s, const HostTensor& h);
  // Counts the first |rows| rows' routes (the step's own tokens, not its padding).
  struct StepGraph;
  Status count_experts(const StepGraph& g, int64_t rows);
  // |plan| padded to the next bucket of sequences when it is a decode-only step and padding is on
  // (LoadOptions::pad_decode_batches): each padding sequence is one row that reads the first
  // sequence's first cached token, writes no KV (slot -1) and computes a logits row nobody reads.
  // Returns |plan| itself otherwise.
  const StepPlan& pad_decode(const StepPlan& plan);
  // Writes the step inputs into the next staging slot and queues their copy into step_buffer_.
  Status upload_step(const StepPlan& plan, const std::vector<int32_t>& rows, StepTensors* t);
  // The plan's sequences' LoRA device slots [S] (their adapters copied into slots as needed), or
  // nothing without adapters (then the plan must name none).
  Status device_lora_slots(const StepPlan& plan, int64_t S, std::vector<int32_t>* out);
  // Pools and normalises the hidden states [T, n_embd] of |plan|'s pool_seqs onto |out|.
  Status pool(const StepPlan& plan, const StepGraph& g, std::vector<float>* out);

  DevicePtr device_;
  std::optional<Placement> placement_;
  SplitStats split_stats_;
  Device* logits_device_ = nullptr;  // the device logits_host_ belongs to
  const Architecture* arch_ = nullptr;
  ModelConfig cfg_;
  ModelConfig rank_cfg_;                // see rank_config()
  std::shared_ptr<Communicator> comm_;  // tensor parallelism (size > 1), else null
  std::unique_ptr<ArchWeights> weights_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string chat_template_;
  std::vector<BufferPtr> weights_buffers_;  // mapped files / repacked blocks, when the device maps host memory
  BufferPtr step_buffer_;      // per-step inputs (token ids, positions, block tables ...)
  size_t step_capacity_ = 0;
  // Host-pinned images of the step inputs, written in turn (the one written last may still be
  // copying), each with the event of its last copy.
  BufferPtr staging_[2];
  Event staging_done_[2];
  int staging_next_ = 0;
  Event collected_;  // the last event collect() waited for: everything queued before it is done
  BufferPtr logits_host_;  // host-pinned: the pending step's logits rows, copied there on the queue
  // A step's graph, kept for the steps after it. What the graph builder makes depends only on
  // the step's input tensors (their shapes, buffers and offsets, which upload_step keeps fixed per
  // bucket), the KV cache and its StepOptions (expert statistics, pooled hidden states), so a
  // steady decode builds its graph once and re-submits it (as the executor re-submits its
  // executable): no graph construction on that path. |key| hashes exactly those inputs.
  struct StepGraph {
    uint64_t key = 0;
    Graph graph;
    ValueId out = kNoValue, hidden = kNoValue;
    std::vector<ValueId> route_ids;
    // A model placed across devices: the graph split into per-device segments.
    std::unique_ptr<SplitGraph> split;
    // Where value |v| was computed (its segment's tensor on a split model).
    const Tensor& tensor(ValueId v) const { return split ? split->tensor(v) : graph.tensor(v); }
    Device& device_of(ValueId v, Device& main) const { return split ? split->device_of(v) : main; }
  };
  // The graph of a step with inputs |in|: a kept one when the same inputs were seen before, else
  // a new one (built, kept, the least recently used dropped).
  Result<StepGraph*> step_graph(const StepTensors& in, KvCache& kv, const StepOptions& opts);
  std::list<StepGraph> step_graphs_;  // most recently used first, at most kStepGraphs
  uint64_t step_graphs_kv_ = 0;       // the KV cache (its buffers) the kept graphs were built over
  uint64_t step_graphs_generation_ = 0;  // bumped by settings the graph builder reads (pooling)
  int64_t step_graphs_built_ = 0;     // graph constructions (the rest reused a kept graph)
  // The step submitted and not yet collected: its graph (pooling and expert statistics read it
  // after the wait), plan facts, and the event of its last queued work.
  struct Pending {
    bool active = false;
    Status status;        // a failure after the step was queued: reported by collect()
    StepGraph* g = nullptr;  // in step_graphs_ (none is dropped while a step is pending)
    size_t logits_floats = 0;  // 0: nothing samples
    int64_t rows = 0;          // the step's own token rows (padding excluded)
    StepPlan plan;             // only for pooling (pool_seqs non-empty)
    Event done;
    Device* wait_on = nullptr;  // the device |done| belongs to
  };
  Pending pending_;
  std::vector<int32_t> padded_tables_;  // block tables padded to their bucket width (upload_step)
  size_t prepared_bytes_ = 0;
  DType act_ = DType::kF32;
  bool pad_decode_ = false;
  int32_t max_padded_seqs_ = 0;  // sequences (and tokens) the step buffer holds
  int32_t max_seqs_ = 64, max_batch_tokens_ = 512;  // LoadOptions': size the window layers' pool
  StepPlan padded_plan_;  // pad_decode's output
  bool collect_expert_stats_ = false;
  ExpertStats expert_stats_;
  std::vector<LoraTarget> lora_targets_;  // the 2-D projections an adapter may target
  std::vector<LoraAdapter> loras_;        // slot i = loras_[i]
  std::unique_ptr<LoraSet> lora_set_;     // their device slots; null without adapters
  int lora_max_slots_ = 0;                // LoraLimits::max_loras of the latest add_lora (0: one per slot)
  std::vector<LoraSet::Key> lora_keys_;   // upload_step's: each sequence's adapter and scale
  int default_lora_ = -1;
  float default_lora_scale_ = 1.0f;
  std::atomic<int32_t> n_loras_{0};                     // loras_.size(), for other threads
  std::unordered_map<int32_t, int32_t> lora_variants_;  // variant id -> adapter id (lora_variant)
  int32_t next_lora_id_ = 0;
};

}  // namespace tessera

// Model's step runner: a StepPlan staged into the step buffer (padded to its buckets), the step
// graph (kept per input shape, built by the family through a GraphContext), submit and collect,
// pooling of embeddings and the expert counts of MoE models. Loading is models/model.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/exec/bucket.h"
#include "core/exec/executor.h"
#include "core/exec/key_hasher.h"
#include "models/model.h"

namespace tessera {

namespace {
int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
}  // namespace

Status Model::device_lora_slots(const StepPlan& p, int64_t S, std::vector<int32_t>* out) {
  out->clear();
  if (!lora_set_) {
    for (int32_t slot : p.lora_slots)
      if (slot != -1)
        return InvalidArgument("the step names LoRA adapter slot " + std::to_string(slot) + " but none is loaded");
    return OkStatus();
  }
  // The plan's adapter per sequence, else the default; padding sequences run the base model.
  std::vector<int32_t>& lora_slots = *out;
  lora_slots.assign(size_t(S), p.lora_slots.empty() ? default_lora_ : -1);
  if (p.lora_slots.size() > size_t(S)) return Internal("step plan: more lora_slots than sequences");
  for (size_t s = 0; s < p.lora_slots.size(); ++s) {
    if (p.lora_slots[s] < -1 || p.lora_slots[s] >= int32_t(loras_.size()))
      return InvalidArgument("LoRA adapter slot " + std::to_string(p.lora_slots[s]) + " is not loaded (" +
                             std::to_string(loras_.size()) + " adapters)");
    lora_slots[s] = p.lora_slots[s];
  }
  // The step's adapters (at their scales) into device slots, the least recently used making
  // room, and each sequence's adapter index turned into its device slot.
  if (!p.lora_scales.empty() && p.lora_scales.size() != p.lora_slots.size())
    return InvalidArgument("step plan: " + std::to_string(p.lora_scales.size()) + " lora_scales for " +
                           std::to_string(p.lora_slots.size()) + " lora_slots");
  lora_keys_.clear();
  for (size_t s = 0; s < lora_slots.size(); ++s)
    lora_keys_.push_back({lora_slots[s], s < p.lora_scales.size() ? p.lora_scales[s]
                                         : p.lora_slots.empty()   ? default_lora_scale_
                                                                  : 1.0f});
  TS_RETURN_IF_ERROR(lora_set_->make_resident(*device_, loras_, lora_keys_));
  for (size_t s = 0; s < lora_slots.size(); ++s) lora_slots[s] = lora_set_->slot_of(lora_keys_[s]);
  return OkStatus();
}

Status Model::upload_step(const StepPlan& p, const std::vector<int32_t>& rows, StepTensors* t) {
  const int64_t T = p.n_tokens(), S = p.n_seqs(), R = int64_t(rows.size());
  // The staging slot written two steps ago: its copy was queued ahead of work the engine has
  // since collected, so there is nothing to wait for unless steps are pipelined deeper.
  const int slot = staging_next_;
  staging_next_ = 1 - staging_next_;
  if (!staging_[slot]) {
    TS_ASSIGN_OR_RETURN(staging_[slot], device_->alloc(step_capacity_, MemoryKind::kHostPinned));
  } else if (staging_done_[slot].value > collected_.value) {
    TS_RETURN_IF_ERROR(device_->wait(staging_done_[slot]));
  }
  char* image = static_cast<char*>(staging_[slot]->host_ptr());
  size_t offset = 0;
  auto put = [&](Tensor* dst, std::initializer_list<int64_t> shape, const std::vector<int32_t>& data) -> Status {
    *dst = Tensor::make(DType::kI32, shape);
    if (size_t(dst->numel()) != data.size()) return Internal("step plan: inconsistent sizes");
    dst->buffer = step_buffer_;
    dst->offset = offset;
    offset += size_t(align_up(dst->nbytes(), 256));
    if (offset > step_capacity_)
      return ResourceExhausted("step of " + std::to_string(T) + " tokens and " + std::to_string(S) +
                               " sequences exceeds the step buffer (raise LoadOptions::max_batch_tokens / max_seqs)");
    std::memcpy(image + dst->offset, data.data(), data.size() * 4);
    return OkStatus();
  };
  TS_RETURN_IF_ERROR(put(&t->tokens, {T}, p.tokens));
  TS_RETURN_IF_ERROR(put(&t->positions, {T}, p.positions));
  TS_RETURN_IF_ERROR(put(&t->slot_mapping, {T}, p.slot_mapping));
  TS_RETURN_IF_ERROR(put(&t->query_start, {S + 1}, p.query_start));
  TS_RETURN_IF_ERROR(put(&t->seq_lens, {S}, p.seq_lens));
  // The block-table width is padded to its bucket (core/exec/bucket.h), so a decode's graph, and
  // the executable recorded for it, change only at bucket edges rather than every block_size
  // tokens. Attention reads a row only up to its sequence's length; the padding is never read.
  auto put_tables = [&](Tensor* dst, const std::vector<int32_t>& tables, int32_t max_blocks) -> Status {
    const int32_t width = bucket_up(max_blocks);
    if (width == max_blocks) return put(dst, {S, width}, tables);
    padded_tables_.assign(size_t(S) * size_t(width), 0);
    for (int64_t s = 0; s < S; ++s)
      std::copy_n(tables.begin() + s * max_blocks, max_blocks, padded_tables_.begin() + s * width);
    return put(dst, {S, width}, padded_tables_);
  };
  TS_RETURN_IF_ERROR(put_tables(&t->block_tables, p.block_tables, p.max_blocks));
  if (p.window_max_blocks > 0) {
    // The sliding-window layers' slots and tables (hybrid memory), padded as the others.
    TS_RETURN_IF_ERROR(put(&t->window_slot_mapping, {T}, p.window_slot_mapping));
    TS_RETURN_IF_ERROR(put_tables(&t->window_block_tables, p.window_block_tables, p.window_max_blocks));
  } else {
    t->window_slot_mapping = Tensor{};
    t->window_block_tables = Tensor{};
  }
  if (!p.state_slots.empty()) {
    TS_RETURN_IF_ERROR(put(&t->state_slots, {S}, p.state_slots));
  } else {
    t->state_slots = Tensor{};
  }
  std::vector<int32_t> lora_slots;
  TS_RETURN_IF_ERROR(device_lora_slots(p, S, &lora_slots));
  if (!lora_slots.empty()) {
    TS_RETURN_IF_ERROR(put(&t->lora_slots, {S}, lora_slots));
  } else {
    t->lora_slots = Tensor{};
  }
  TS_RETURN_IF_ERROR(put(&t->logit_rows, {R}, rows));
  // One queued copy of the whole image: the device reads the inputs in queue order, after the
  // previous step has finished with the step buffer, and the host does not wait for it.
  const CopyRegion region{staging_[slot].get(), 0, step_buffer_.get(), 0, offset};
  TS_ASSIGN_OR_RETURN(staging_done_[slot], device_->copy(std::span<const CopyRegion>(&region, 1)));
  return OkStatus();
}

const StepPlan& Model::pad_decode(const StepPlan& plan) {
  const int32_t S = plan.n_seqs();
  if (!pad_decode_ || !plan.pool_seqs.empty() || plan.n_tokens() != S || plan.logit_rows.size() != size_t(S) || S == 0)
    return plan;
  for (int32_t s = 0; s <= S; ++s)
    if (plan.query_start[size_t(s)] != s) return plan;  // not one row per sequence
  const int32_t padded = std::min(bucket_up(S), std::max(S, max_padded_seqs_));
  if (padded == S) return plan;
  StepPlan& p = padded_plan_;
  p = plan;
  p.block_copies.clear();
  p.window_block_copies.clear();
  p.swap_out.clear();
  p.swap_in.clear();
  const std::vector<int32_t> first_table(plan.block_tables.begin(), plan.block_tables.begin() + plan.max_blocks);
  const std::vector<int32_t> first_window_table(plan.window_block_tables.begin(),
                                                plan.window_block_tables.begin() + plan.window_max_blocks);
  for (int32_t s = S; s < padded; ++s) {
    if (plan.window_max_blocks > 0) {
      p.window_slot_mapping.push_back(-1);
      p.window_block_tables.insert(p.window_block_tables.end(), first_window_table.begin(), first_window_table.end());
    }
    p.tokens.push_back(plan.tokens[0]);
    p.positions.push_back(0);
    p.slot_mapping.push_back(-1);  // writes nothing
    p.query_start.push_back(s + 1);
    p.seq_lens.push_back(1);       // attends to the first sequence's token 0, which is cached
    p.block_tables.insert(p.block_tables.end(), first_table.begin(), first_table.end());
    p.logit_rows.push_back(s);
  }
  return p;
}

Status Model::forward(const StepPlan& plan, KvCache& kv, std::vector<float>* logits) {
  TS_RETURN_IF_ERROR(submit(plan, kv));
  return collect(logits);
}

Status Model::submit_step(const StepPlan& plan, KvCache& kv) {
  if (pending_.active) return Internal("Model::submit: the previous step was not collected");
  pending_.status = OkStatus();
  pending_.logits_floats = 0;
  pending_.plan = {};
  pending_.wait_on = device_.get();
  if (plan.n_tokens() == 0) {
    pending_.active = true;
    pending_.done = Event{};
    return OkStatus();
  }
  for (int32_t t : plan.tokens)
    if (t < 0 || t >= cfg_.n_vocab) return InvalidArgument("token id " + std::to_string(t) + " outside the vocabulary");
  // Tensor parallelism: the other ranks run the same step (Model::follow).
  if (comm_ && comm_->rank() == 0 && !followers_stopped_) TS_RETURN_IF_ERROR(broadcast_step(plan));
  if (!plan.pool_seqs.empty() && embedding_dim() == 0) return InvalidArgument(why_no_embeddings());
  if (kv.has_window() && plan.window_max_blocks == 0)
    return InvalidArgument("the KV cache keeps sliding-window layers in a pool of their own, but the step plan has no "
                           "window tables (a plan made without the engine's scheduler needs a cache with window_memory off)");
  if (kv.states() && plan.state_slots.size() != size_t(plan.n_seqs()))
    return InvalidArgument("the model has recurrent layers, but the step plan gives " + std::to_string(plan.state_slots.size()) +
                           " state slots for " + std::to_string(plan.n_seqs()) + " sequences (plan steps with the engine's scheduler)");
  if (cfg_.is_encoder() && !plan.logit_rows.empty())
    return InvalidArgument(cfg_.arch + " is an encoder: it produces embeddings, not next-token logits");
  // A step where nothing samples (a prefill chunk) still runs every layer to fill the KV cache;
  // the graph then computes one logits row, which is discarded.
  // Padding sequences would need state rows of their own: a recurrent model's decode is not padded.
  const StepPlan& run = kv.states() ? plan : pad_decode(plan);
  const std::vector<int32_t> last_row = {run.n_tokens() - 1};
  const std::vector<int32_t>& rows = run.logit_rows.empty() ? last_row : run.logit_rows;
  StepTensors in;
  in.act = act_;
  TS_RETURN_IF_ERROR(upload_step(run, rows, &in));
  Pending& p = pending_;
  p.rows = plan.n_tokens();
  const bool stats = collect_expert_stats_ && cfg_.is_moe();
  StepOptions so;
  so.expert_stats = stats;
  so.pooled = !plan.pool_seqs.empty();
  so.lora = lora_set_.get();
  so.tp_rank = tp_rank();
  TS_ASSIGN_OR_RETURN(p.g, step_graph(in, kv, so));
  if (p.g->split) {
    const SplitStats before = p.g->split->stats();
    TS_ASSIGN_OR_RETURN(p.done, p.g->split->run());
    const SplitStats& after = p.g->split->stats();
    split_stats_.segments = after.segments;
    split_stats_.copies += after.copies - before.copies;
    split_stats_.copied_bytes += after.copied_bytes - before.copied_bytes;
    split_stats_.copy_seconds += after.copy_seconds - before.copy_seconds;
    split_stats_.wait_seconds += after.wait_seconds - before.wait_seconds;
    split_stats_.reduces += after.reduces - before.reduces;
    split_stats_.reduced_bytes += after.reduced_bytes - before.reduced_bytes;
    split_stats_.reduce_seconds += after.reduce_seconds - before.reduce_seconds;
  } else {
    TS_ASSIGN_OR_RETURN(p.done, device_->compute_async(p.g->graph));
  }
  p.wait_on = p.g->split ? &p.g->split->final_device() : device_.get();
  p.active = true;
  if (!plan.logit_rows.empty()) {
    // The logits rows go to host-pinned memory on the queue, behind the step: collect() waits
    // for this copy alone.
    const Tensor& lt = p.g->tensor(p.g->out);  // [rows (padded), vocab]: the step's own rows first
    Device& out_dev = p.g->device_of(p.g->out, *device_);
    const size_t bytes = plan.logit_rows.size() * size_t(lt.cols()) * 4;
    if (!logits_host_ || logits_host_->size() < bytes || logits_device_ != &out_dev) {
      logits_host_.reset();
      logits_device_ = &out_dev;
      auto grown = out_dev.alloc(std::max(bytes, size_t(cfg_.n_vocab) * 4 * 8), MemoryKind::kHostPinned);
      if (!grown.ok()) {
        p.status = grown.status();
        return OkStatus();
      }
      logits_host_ = *std::move(grown);
    }
    const CopyRegion region{lt.buffer.get(), lt.offset, logits_host_.get(), 0, bytes};
    auto copied = out_dev.copy(std::span<const CopyRegion>(&region, 1));
    if (!copied.ok()) p.status = copied.status();
    else p.done = *copied;
    p.wait_on = &out_dev;
    p.logits_floats = bytes / 4;
  }
  if (!plan.pool_seqs.empty()) p.plan = plan;
  return OkStatus();
}

Status Model::collect_step(std::vector<float>* logits) {
  logits->clear();
  if (!pending_.active) return Internal("Model::collect: no step was submitted");
  Pending& p = pending_;
  p.active = false;
  TS_RETURN_IF_ERROR(p.status);
  if (p.wait_on == device_.get()) {
    TS_RETURN_IF_ERROR(device_->executor().wait(p.done));  // counted as device time
    collected_ = p.done;
  } else {
    // A split model's last segment or its logits copy, on another device than the main one: the
    // main device's queue (the step buffer's copy) finished before the first segment ran.
    TS_RETURN_IF_ERROR(p.wait_on->wait(p.done));
  }
  if (p.logits_floats > 0) {
    const float* src = static_cast<const float*>(logits_host_->host_ptr());
    logits->assign(src, src + p.logits_floats);
  }
  if (!p.g->route_ids.empty()) TS_RETURN_IF_ERROR(count_experts(*p.g, p.rows));
  if (p.plan.pool_seqs.empty()) return OkStatus();
  return pool(p.plan, *p.g, logits);
}

namespace {
constexpr size_t kStepGraphs = 8;
}  // namespace

Result<Model::StepGraph*> Model::step_graph(const StepTensors& in, KvCache& kv, const StepOptions& opts) {
  KeyHasher key;
  for (const Tensor* t :
       {&in.tokens, &in.positions, &in.slot_mapping, &in.query_start, &in.seq_lens, &in.block_tables, &in.logit_rows,
        &in.window_slot_mapping, &in.window_block_tables, &in.state_slots, &in.lora_slots}) {
    key.mix_tensor(*t);
    key.mix_place(*t);
  }
  key.mix(uint64_t(in.act));
  key.mix(uint64_t(opts.expert_stats) | uint64_t(opts.pooled) << 1 | uint64_t(opts.lora != nullptr) << 2);
  // The KV cache: kept graphs hold its buffers (and so keep them alive), so graphs of another
  // cache are dropped rather than kept beside it. While they are kept, a new cache cannot reuse
  // the old one's buffer addresses, so its first buffers tell the caches apart.
  KeyHasher cache;
  cache.mix(reinterpret_cast<uintptr_t>(&kv));
  cache.mix(step_graphs_generation_);
  for (int l = 0; l < kv.config().n_layers; ++l)
    if (kv.has_kv(l)) {  // the first layer with K/V (a recurrent layer has none)
      cache.mix_place(kv.k(l));
      cache.mix_place(kv.v(l));
      break;
    }
  if (const RecurrentStatePool* states = kv.states(); states && !states->tensors().empty())
    cache.mix_place(states->tensors()[0]);
  if (cache.value() != step_graphs_kv_) {
    step_graphs_.clear();
    step_graphs_kv_ = cache.value();
  }
  auto hit = std::find_if(step_graphs_.begin(), step_graphs_.end(), [&key](const StepGraph& g) { return g.key == key.value(); });
  if (hit != step_graphs_.end()) {
    step_graphs_.splice(step_graphs_.begin(), step_graphs_, hit);
    return &step_graphs_.front();
  }
  StepGraph g;
  g.key = key.value();
  GraphContext ctx(g.graph, rank_cfg_, in, kv, opts);
  g.out = arch_->build_graph(ctx, *weights_);
  TS_RETURN_IF_ERROR(ctx.status());
  g.hidden = opts.pooled ? ctx.hidden : kNoValue;
  g.route_ids = std::move(ctx.route_ids);
  TS_RETURN_IF_ERROR(g.graph.status());
  ++step_graphs_built_;
  if (step_graphs_.size() >= kStepGraphs) step_graphs_.pop_back();
  step_graphs_.push_front(std::move(g));
  StepGraph& kept = step_graphs_.front();
  if ((placement_ && placement_->split()) || tp_size() > 1) {
    // Segments per device, over the kept graph (the split refers to it); the step inputs (one
    // buffer) go wherever a segment reads them. Tensor parallelism: segments between the
    // all-reduces, which the communicator performs.
    const Buffer* step_inputs[] = {step_buffer_.get()};
    auto split = SplitGraph::build(kept.graph, *device_, step_inputs, comm_.get());
    if (!split.ok()) {
      step_graphs_.pop_front();
      return split.status();
    }
    kept.split = std::move(split).value();
  }
  return &kept;
}

Status Model::pool(const StepPlan& plan, const StepGraph& g, std::vector<float>* out) {
  const Tensor& ht = g.tensor(g.hidden);  // [T, D]
  const int64_t D = ht.cols();
  std::vector<float> h(size_t(ht.numel()));
  TS_RETURN_IF_ERROR(g.device_of(g.hidden, *device_).download(ht, h.data(), h.size() * 4));
  for (int32_t s : plan.pool_seqs) {
    if (s < 0 || s >= plan.n_seqs()) return Internal("pool_seqs: sequence " + std::to_string(s) + " not in the step");
    const int64_t r0 = plan.query_start[size_t(s)], r1 = plan.query_start[size_t(s) + 1];
    // Pooling sees the whole sequence: a chunk that continues cached tokens would leave them out.
    if (plan.seq_lens[size_t(s)] != r1 - r0 || r1 <= r0)
      return Internal("pool_seqs: sequence " + std::to_string(s) + " is not whole in this step");
    std::vector<double> v(size_t(D), 0.0);
    const int64_t first = cfg_.pooling == Pooling::kCls ? r0 : cfg_.pooling == Pooling::kLast ? r1 - 1 : r0;
    const int64_t last = cfg_.pooling == Pooling::kMean ? r1 : first + 1;
    for (int64_t r = first; r < last; ++r)
      for (int64_t i = 0; i < D; ++i) v[size_t(i)] += h[size_t(r * D + i)];
    double norm = 0.0;
    for (double& e : v) {
      e /= double(last - first);
      norm += e * e;
    }
    // As sentence-transformers' Normalize (F.normalize): divide by max(|v|, 1e-12).
    const double scale = cfg_.normalize_embd ? 1.0 / std::max(std::sqrt(norm), 1e-12) : 1.0;
    for (double e : v) out->push_back(float(e * scale));
  }
  return OkStatus();
}

const char* pooling_name(Pooling p) {
  switch (p) {
    case Pooling::kNone: return "none";
    case Pooling::kMean: return "mean";
    case Pooling::kCls: return "cls";
    case Pooling::kLast: return "last";
  }
  return "unknown";
}

Status Model::count_experts(const StepGraph& g, int64_t rows) {
  const std::vector<ValueId>& route_ids = g.route_ids;
  if (int(route_ids.size()) != cfg_.n_layers) return Internal("expert stats: one route per layer expected");
  std::vector<int32_t> ids;
  for (size_t l = 0; l < route_ids.size(); ++l) {
    const Tensor& t = g.tensor(route_ids[l]);
    ids.resize(size_t(t.numel()));
    TS_RETURN_IF_ERROR(g.device_of(route_ids[l], *device_).download(t, ids.data(), ids.size() * 4));
    int64_t* row = &expert_stats_.counts[l * size_t(cfg_.n_experts)];
    // [T, k] routes; rows past |rows| are a padded step's padding.
    const size_t used = std::min(ids.size(), size_t(rows) * size_t(cfg_.n_experts_used));
    for (size_t i = 0; i < used; ++i) {
      const int32_t e = ids[i];
      if (e < 0 || e >= cfg_.n_experts) return Internal("expert stats: expert id " + std::to_string(e) + " out of range");
      ++row[e];
    }
  }
  expert_stats_.tokens += std::min<int64_t>(rows, g.tensor(route_ids[0]).shape[0]);
  return OkStatus();
}

}  // namespace tessera

namespace tessera {

ExecutorStats Model::executor_stats() const {
  ExecutorStats sum = device_->executor().stats();
  for (const StepGraph& g : step_graphs_)
    if (g.split) g.split->add_executor_stats(&sum);
  return sum;
}

}  // namespace tessera

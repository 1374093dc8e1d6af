// Tensor parallelism's part of loading (docs/multi-device.md): which shapes a rank computes
// with, and its shard of each split weight. The step side is GraphContext (the all-reduces after
// row-parallel products) and SplitGraph (which performs them through the Communicator).
#include <cstring>

#include "core/sched/step_plan_codec.h"
#include "models/model.h"

namespace tessera {

Status Model::set_tensor_parallel(std::shared_ptr<Communicator> comm) {
  rank_cfg_ = cfg_;
  comm_.reset();
  if (!comm || comm->size() == 1) return OkStatus();
  const int tp = comm->size();
  const std::string degree = "tensor parallelism over " + std::to_string(tp) + " ranks";
  if (const std::string why = arch_->tensor_parallel_unsupported(cfg_); !why.empty())
    return Unimplemented(degree + ": architecture " + cfg_.arch + " cannot split yet: " + why);
  if (!cfg_.layer_head_dim.empty() || !cfg_.layer_kv_heads.empty() || !cfg_.layer_n_ff.empty())
    return Unimplemented(degree + ": layers of different shapes are not split yet");
  auto split = [&](int* n, const char* what) -> Status {
    if (*n % tp != 0)
      return InvalidArgument(degree + ": " + std::to_string(tp) + " does not divide the model's " + std::to_string(*n) +
                             " " + what + " (choose a degree that divides the heads and FFN widths)");
    *n /= tp;
    return OkStatus();
  };
  ModelConfig& c = rank_cfg_;
  TS_RETURN_IF_ERROR(split(&c.n_heads, "attention heads"));
  TS_RETURN_IF_ERROR(split(&c.n_kv_heads, "KV heads"));
  if (c.is_moe()) {
    TS_RETURN_IF_ERROR(split(&c.n_ff_exp, "expert FFN rows"));
    if (c.n_ff_shexp > 0) TS_RETURN_IF_ERROR(split(&c.n_ff_shexp, "shared-expert FFN rows"));
  } else {
    TS_RETURN_IF_ERROR(split(&c.n_ff, "FFN rows"));
  }
  comm_ = std::move(comm);
  return OkStatus();
}

namespace {

// The address of row |o| (a row: the last dim) of |h|, whose dim-0 slices may lie stride0 apart.
const uint8_t* row_at(const HostTensor& h, int64_t o, size_t row_bytes) {
  const auto* base = static_cast<const uint8_t*>(h.data);
  if (h.shape.size() < 2) return base;
  int64_t rows_per_slice = 1;
  for (size_t i = 1; i + 1 < h.shape.size(); ++i) rows_per_slice *= h.shape[i];
  const int64_t slice = o / rows_per_slice, within = o % rows_per_slice;
  const size_t slice_bytes = h.stride0 ? size_t(h.stride0) : size_t(rows_per_slice) * row_bytes;
  return base + size_t(slice) * slice_bytes + size_t(within) * row_bytes;
}

}  // namespace

Result<HostTensor> Model::shard_weight(const HostTensor& h, int dim, const std::string& name) const {
  const int tp = tp_size(), r = tp_rank();
  const int n = int(h.shape.size());
  if (dim < 0 || dim >= n)
    return Internal(name + ": tensor-parallel dim " + std::to_string(dim) + " of a rank-" + std::to_string(n));
  const int64_t S = h.shape[size_t(dim)], part = S / tp, K = h.shape[size_t(n - 1)];
  if (S % tp != 0)
    return InvalidArgument(name + ": tensor parallelism over " + std::to_string(tp) +
                           " ranks cannot split its dim of " + std::to_string(S));
  const bool columns = dim == n - 1;  // a row-parallel weight: each row keeps a range of its blocks
  if (columns) {
    if (const std::string err = dtype_row_check(h.dtype, part); !err.empty())
      return InvalidArgument(name + ": tensor parallelism over " + std::to_string(tp) + " ranks splits its rows of " +
                             std::to_string(K) + " into " + std::to_string(part) + ", which its format cannot: " + err);
  }
  const size_t row_bytes = size_t(dtype_row_bytes(h.dtype, K));
  int64_t rows = 1;  // rows (of the last dim) in the tensor
  for (int i = 0; i + 1 < n; ++i) rows *= h.shape[size_t(i)];
  int64_t inner = 1;  // rows in one index of |dim| (when it is not the last)
  for (int i = dim + 1; i + 1 < n; ++i) inner *= h.shape[size_t(i)];
  HostTensor out = h;
  out.shape[size_t(dim)] = part;
  out.stride0 = 0;
  out.region_is_file = false;
  const size_t piece = columns ? size_t(dtype_row_bytes(h.dtype, part)) : row_bytes;
  auto block = std::make_shared<std::vector<uint8_t>>();
  block->reserve(size_t(rows / (columns ? 1 : tp)) * piece);
  for (int64_t o = 0; o < rows; ++o) {
    if (!columns) {  // keep the rows whose index along |dim| is in this rank's part
      const int64_t along = (o / inner) % S;
      if (along / part != r) continue;
    }
    const uint8_t* src = row_at(h, o, row_bytes) + (columns ? size_t(r) * piece : 0);
    block->insert(block->end(), src, src + piece);
  }
  out.data = out.region = block->data();
  out.nbytes = out.region_bytes = block->size();
  out.keepalive = std::shared_ptr<const void>(block, block->data());
  return out;
}

Status Model::submit(const StepPlan& plan, KvCache& kv) {
  if (!comm_) return submit_step(plan, kv);  // one process: no failure rule, no lock per step
  if (Status h = health(); !h.ok()) return h;
  return note_tp_failure(submit_step(plan, kv));
}

Status Model::collect(std::vector<float>* logits) { return note_tp_failure(collect_step(logits)); }

Status Model::note_tp_failure(Status s) {
  if (!s.ok() && comm_ && s.code() == StatusCode::kUnavailable) {
    std::lock_guard<std::mutex> lock(tp_failure_mutex_);
    if (tp_failure_.ok()) tp_failure_ = Unavailable("tensor parallelism stopped: " + s.message());
  }
  return s;
}

Status Model::health() const {
  std::lock_guard<std::mutex> lock(tp_failure_mutex_);
  return tp_failure_;
}

// The follower protocol: rank 0 broadcasts each step's plan (its length in words first, -1 for
// "stop"); the others decode it and run the same step.
Status Model::broadcast_step(const StepPlan& plan) {
  std::vector<int32_t> words = encode_step_plan(plan);
  int64_t n = int64_t(words.size());
  TS_RETURN_IF_ERROR(comm_->broadcast(&n, sizeof n, 0));
  return comm_->broadcast(words.data(), size_t(n) * 4, 0);
}

Status Model::stop_followers() {
  if (!comm_ || comm_->rank() != 0 || followers_stopped_) return OkStatus();
  followers_stopped_ = true;
  TS_RETURN_IF_ERROR(health());  // a broken group: nobody is left to tell
  int64_t stop = -1;
  return comm_->broadcast(&stop, sizeof stop, 0);
}

Status Model::follow(KvCache& kv) {
  if (!comm_ || comm_->rank() == 0)
    return InvalidArgument("Model::follow: only a tensor-parallel rank other than 0 follows");
  std::vector<int32_t> words;
  std::vector<float> logits;
  const double timeout = comm_->timeout();
  for (;;) {
    int64_t n = 0;
    comm_->set_timeout(0);  // idle between requests for as long as rank 0 is
    const Status header = comm_->broadcast(&n, sizeof n, 0);
    comm_->set_timeout(timeout);
    TS_RETURN_IF_ERROR(header);
    if (n < 0) return OkStatus();
    words.resize(size_t(n));
    TS_RETURN_IF_ERROR(comm_->broadcast(words.data(), size_t(n) * 4, 0));
    auto decoded = decode_step_plan(words);
    if (!decoded.ok()) return decoded.status().with_context("rank " + std::to_string(comm_->rank()) + ": ");
    const StepPlan& plan = *decoded;
    // What rank 0's engine applied before its step, in its order.
    TS_RETURN_IF_ERROR(kv.swap_out(plan.swap_out));
    TS_RETURN_IF_ERROR(kv.swap_in(plan.swap_in));
    TS_RETURN_IF_ERROR(kv.copy_blocks(plan.block_copies));
    TS_RETURN_IF_ERROR(kv.copy_window_blocks(plan.window_block_copies));
    TS_RETURN_IF_ERROR(forward(plan, kv, &logits));
  }
}

}  // namespace tessera

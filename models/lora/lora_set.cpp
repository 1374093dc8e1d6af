// LoraSet: the adapters' A and B in device slots, one buffer per targeted base weight (A, B,
// ranks, scales at 256-byte aligned offsets); adapters are copied into a slot when a step needs
// them, the least recently used one making room.
#include <algorithm>
#include <array>
#include <cstring>

#include "models/lora/lora.h"
#include "quant/half.h"

namespace tessera {

namespace {
size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// |v| in |dt| (f32, or f16/bf16 when every adapter came in it: the values convert exactly).
std::vector<uint16_t> to_half(const std::vector<float>& v, DType dt) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = dt == DType::kF16 ? f32_to_fp16(v[i]) : f32_to_bf16(v[i]);
  return out;
}

// Rows [first, first + n) of |t|'s leading dimension, as a tensor of its own (contiguous |t|).
Tensor leading_rows(const Tensor& t, int64_t first, int64_t n) {
  std::array<int64_t, kMaxDims> shape = t.shape;
  shape[0] = n;
  Tensor v = Tensor::make(t.dtype, t.rank, shape.data());
  v.buffer = t.buffer;
  v.offset = t.offset + size_t(first) * (t.nbytes() / size_t(t.shape[0]));
  return v;
}
}  // namespace

Result<std::unique_ptr<LoraSet>> LoraSet::build(Device& device, const std::vector<LoraAdapter>& adapters, int slots) {
  if (slots < 1) return InvalidArgument("a LoRA set needs at least one device slot");
  auto set = std::make_unique<LoraSet>();
  const int64_t S = slots;
  std::vector<DType> dtypes;  // of the loaded adapters (holes have none)
  for (const LoraAdapter& a : adapters)
    if (!a.modules.empty()) dtypes.push_back(a.dtype);
  set->dtype_ = common_lora_dtype(dtypes);
  set->slots_ = slots;
  set->resident_.assign(size_t(S), Key{});
  set->last_use_.assign(size_t(S), 0);
  for (const LoraAdapter& a : adapters) set->max_rank_ = std::max(set->max_rank_, a.rank);
  const int64_t R = set->max_rank_;
  // Every base weight any adapter targets, in a fixed order (the adapters' own map order differs).
  for (const LoraAdapter& a : adapters)
    for (const auto& [w, p] : a.modules)
      if (std::find(set->order_.begin(), set->order_.end(), w) == set->order_.end()) set->order_.push_back(w);
  // NOTE: an upload may be queued rather than done when it returns (a device whose memory the host
  // cannot address copies through staging), and a buffer freed under a queued copy is written
  // after it is freed (on lavapipe, host heap). So every return below waits for the uploads
  // first: on success the set is complete, and on failure its buffers outlive their copies.
  const Status filled = [&]() -> Status {
    for (const WeightTensor* w : set->order_) {
      Module m;
      for (const LoraAdapter& a : adapters)  // the logical [N, K] the adapter was checked against
        if (auto it = a.modules.find(w); it != a.modules.end()) {
          m.rows = it->second.rows;
          m.cols = it->second.cols;
          break;
        }
      m.a = Tensor::make(set->dtype_, {S, R, m.cols});
      m.b = Tensor::make(set->dtype_, {S, R, m.rows});
      m.ranks = Tensor::make(DType::kI32, {S});
      m.scales = Tensor::make(DType::kF32, {S});
      size_t offset = 0;
      for (Tensor* t : {&m.a, &m.b, &m.ranks, &m.scales}) {
        t->offset = offset;
        offset += align256(t->nbytes());
      }
      TS_ASSIGN_OR_RETURN(BufferPtr buf, device.alloc(offset));
      set->buffers_.push_back(buf);
      set->bytes_ += offset;
      // Empty slots: rank 0, and zeros everywhere (no kernel reads past a rank, but none reads
      // uninitialised memory either).
      const std::vector<uint8_t> zeros(m.a.nbytes() + m.b.nbytes(), 0);
      for (Tensor* t : {&m.a, &m.b, &m.ranks, &m.scales}) {
        t->buffer = buf;
        TS_RETURN_IF_ERROR(device.upload(*t, zeros.data(), t->nbytes()));
      }
      set->modules_.emplace(w, std::move(m));
    }
    return OkStatus();
  }();
  const Status synced = device.synchronize();
  TS_RETURN_IF_ERROR(filled);
  TS_RETURN_IF_ERROR(synced);
  return set;
}

int32_t LoraSet::slot_of(const Key& key) const {
  auto it = std::find(resident_.begin(), resident_.end(), key);
  return key.index < 0 || it == resident_.end() ? -1 : int32_t(it - resident_.begin());
}

Status LoraSet::make_resident(Device& device, const std::vector<LoraAdapter>& adapters, std::span<const Key> needed) {
  ++use_clock_;
  std::vector<Key> distinct;
  for (const Key& k : needed) {
    if (k.index < 0 || std::find(distinct.begin(), distinct.end(), k) != distinct.end()) continue;
    if (k.index >= int32_t(adapters.size()))
      return InvalidArgument("LoRA adapter slot " + std::to_string(k.index) + " is not loaded");
    if (adapters[size_t(k.index)].id != 0) distinct.push_back(k);  // a hole runs as the base model (slot_of: -1)
  }
  if (int(distinct.size()) > slots_)
    return ResourceExhausted("the step uses " + std::to_string(distinct.size()) +
                             " LoRA adapters (each scale counts as one), more than the " + std::to_string(slots_) +
                             " device slots (--max-loras)");
  for (const Key& k : distinct)
    if (const int32_t held = slot_of(k); held >= 0) last_use_[size_t(held)] = use_clock_;
  for (const Key& k : distinct) {
    if (slot_of(k) >= 0) continue;
    // A free slot, else the least recently used one this step does not need (every slot this
    // step needs was stamped above or when it was loaded, so it is never the victim).
    int victim = -1;
    for (int s = 0; s < slots_; ++s) {
      if (resident_[size_t(s)].index < 0) {
        victim = s;
        break;
      }
      if (last_use_[size_t(s)] < use_clock_ && (victim < 0 || last_use_[size_t(s)] < last_use_[size_t(victim)]))
        victim = s;
    }
    if (victim < 0) return Internal("LoRA: no device slot to evict");  // excluded by the count above
    resident_[size_t(victim)] = Key{};  // a failed copy leaves the slot empty, not half-written
    TS_RETURN_IF_ERROR(load(device, adapters[size_t(k.index)], k.scale, victim));
    resident_[size_t(victim)] = k;
    last_use_[size_t(victim)] = use_clock_;
    ++loads_;
  }
  return OkStatus();
}

Status LoraSet::load(Device& device, const LoraAdapter& adapter, float scale_by, int slot) {
  // The caller has collected the previous step (Model::submit), so no queued work reads the slot;
  // each upload copies its source before it returns.
  const int64_t R = max_rank_, r = adapter.rank;
  if (r > R) return Internal("LoRA: adapter '" + adapter.name + "' has a rank above the set's");
  for (const WeightTensor* w : order_) {
    const Module& m = modules_.at(w);
    auto it = adapter.modules.find(w);
    const int64_t N = m.rows, K = m.cols;
    std::vector<float> A(size_t(R * K), 0.0f), B(size_t(R * N), 0.0f);
    int32_t rank = 0;
    float scale = 0.0f;
    if (it != adapter.modules.end()) {
      if (int64_t(it->second.a.size()) != r * K || int64_t(it->second.b.size()) != N * r)
        return Internal("lora: adapter '" + adapter.name + "' module sizes do not match its base weight");
      rank = int32_t(r);
      scale = adapter.scale * scale_by;
      std::copy(it->second.a.begin(), it->second.a.end(), A.begin());  // rows [0, r) of [R, K]
      for (int64_t n = 0; n < N; ++n)  // lora_B [N, r] transposed into rows [0, r) of [R, N]
        for (int64_t j = 0; j < r; ++j) B[size_t(j * N + n)] = it->second.b[size_t(n * r + j)];
    }
    const Tensor a = leading_rows(m.a, slot, 1), b = leading_rows(m.b, slot, 1);
    if (dtype_ == DType::kF32) {
      TS_RETURN_IF_ERROR(device.upload(a, A.data(), a.nbytes()));
      TS_RETURN_IF_ERROR(device.upload(b, B.data(), b.nbytes()));
    } else {
      TS_RETURN_IF_ERROR(device.upload(a, to_half(A, dtype_).data(), a.nbytes()));
      TS_RETURN_IF_ERROR(device.upload(b, to_half(B, dtype_).data(), b.nbytes()));
    }
    TS_RETURN_IF_ERROR(device.upload(leading_rows(m.ranks, slot, 1), &rank, sizeof rank));
    TS_RETURN_IF_ERROR(device.upload(leading_rows(m.scales, slot, 1), &scale, sizeof scale));
  }
  return OkStatus();
}

}  // namespace tessera

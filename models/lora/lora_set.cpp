// LoraSet: the loaded adapters' A and B stacked into device slots, one buffer per targeted base
// weight (A, B, ranks, scales at 256-byte aligned offsets).
#include <algorithm>
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
}  // namespace

Result<std::unique_ptr<LoraSet>> LoraSet::build(Device& device, const std::vector<LoraAdapter>& adapters) {
  auto set = std::make_unique<LoraSet>();
  const int64_t S = int64_t(adapters.size());
  std::vector<DType> dtypes;  // of the loaded adapters (holes have none)
  for (const LoraAdapter& a : adapters)
    if (!a.modules.empty()) dtypes.push_back(a.dtype);
  const DType dt = common_lora_dtype(dtypes);
  set->slots_ = int(S);
  for (const LoraAdapter& a : adapters) set->max_rank_ = std::max(set->max_rank_, a.rank);
  const int64_t R = set->max_rank_;
  // Every base weight any adapter targets, in a fixed order (the adapters' own map order differs).
  std::vector<const WeightTensor*> weights;
  for (const LoraAdapter& a : adapters)
    for (const auto& [w, p] : a.modules)
      if (std::find(weights.begin(), weights.end(), w) == weights.end()) weights.push_back(w);
  // NOTE: an upload may be queued rather than done when it returns (a device whose memory the host
  // cannot address copies through staging), and a buffer freed under a queued copy is written
  // after it is freed (on lavapipe, host heap). So every return below waits for the uploads
  // first: on success the set is complete, and on failure its buffers outlive their copies.
  const Status filled = [&]() -> Status {
    for (const WeightTensor* w : weights) {
      // The logical [N, K] the adapter was checked against (a device may have repacked |w|).
      int64_t N = 0, K = 0;
      for (const LoraAdapter& a : adapters)
        if (auto it = a.modules.find(w); it != a.modules.end()) {
          N = it->second.rows;
          K = it->second.cols;
          break;
        }
      std::vector<float> A(size_t(S * R * K), 0.0f), B(size_t(S * N * R), 0.0f), scales(size_t(S), 0.0f);
      std::vector<int32_t> ranks(size_t(S), 0);
      for (int64_t s = 0; s < S; ++s) {
        const LoraAdapter& a = adapters[size_t(s)];
        auto it = a.modules.find(w);
        if (it == a.modules.end()) continue;
        const int64_t r = a.rank;
        if (int64_t(it->second.a.size()) != r * K || int64_t(it->second.b.size()) != N * r)
          return Internal("lora: adapter '" + a.name + "' module sizes do not match its base weight");
        ranks[size_t(s)] = int32_t(r);
        scales[size_t(s)] = a.scale;
        std::copy(it->second.a.begin(), it->second.a.end(), A.begin() + s * R * K);  // rows [0, r) of [R, K]
        for (int64_t n = 0; n < N; ++n)  // lora_B [N, r] transposed into rows [0, r) of [R, N]
          for (int64_t j = 0; j < r; ++j) B[size_t((s * R + j) * N + n)] = it->second.b[size_t(n * r + j)];
      }
      Module m;
      m.a = Tensor::make(dt, {S, R, K});
      m.b = Tensor::make(dt, {S, R, N});
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
      std::vector<uint16_t> A16, B16;
      if (dt != DType::kF32) {
        A16 = to_half(A, dt);
        B16 = to_half(B, dt);
      }
      const void* data[] = {dt == DType::kF32 ? static_cast<const void*>(A.data()) : A16.data(),
                            dt == DType::kF32 ? static_cast<const void*>(B.data()) : B16.data(), ranks.data(),
                            scales.data()};
      int i = 0;
      for (Tensor* t : {&m.a, &m.b, &m.ranks, &m.scales}) {
        t->buffer = buf;
        TS_RETURN_IF_ERROR(device.upload(*t, data[i++], t->nbytes()));
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

}  // namespace tessera

// One weight of a checkpoint in whichever form it was saved -> HostTensor in one of our dtypes.
//   <p>.weight F32/F16/BF16                          as is (in place in the mapped shard)
//   <p>.weight F8_E4M3/E5M2 + <p>.weight_scale        kFP8_E4M3/E5M2 (per-tensor or per-channel)
//   <p>.weight U8 + <p>.weight_scale F8_E4M3 + weight_scale_2         NVFP4 (ModelOpt)
//   <p>.weight_packed U8 + weight_scale F8_E4M3 + weight_global_scale NVFP4 (compressed-tensors)
//   <p>.weight_packed U8 + weight_scale U8/F8_E8M0                    MXFP4 (compressed-tensors)
//   <p>_blocks U8 [N, K/32, 16] + <p>_scales U8                       MXFP4 (gpt-oss)
//   <p>.qweight/.qzeros/.scales I32/I32/F16 (quant_method awq | gptq)  kINT4_G{32,64,128}
// and by a family's rule (Architecture::hf_tensor, load_rule): F32/F16/BF16 values transformed,
// unit dims squeezed, or routed experts fused in one tensor split into row views.
#include <cmath>
#include <cstring>

#include "models/safetensors/hf_model.h"
#include "models/safetensors/repack.h"
#include "quant/half.h"

namespace tessera::safetensors {

namespace {

std::string where(const TensorRef& r) { return r.file->path() + ": tensor '" + r.info->name + "'"; }

Status expect(const TensorRef& r, const std::vector<int64_t>& want, std::initializer_list<StDType> dtypes) {
  bool dt_ok = false;
  for (StDType d : dtypes) dt_ok |= r.info->dtype == d;
  if (!dt_ok) {
    std::string names;
    for (StDType d : dtypes) names += std::string(names.empty() ? "" : "/") + st_dtype_name(d);
    return InvalidArgument(where(r) + " has dtype " + st_dtype_name(r.info->dtype) + ", expected " + names);
  }
  if (r.info->shape == want) return OkStatus();
  TensorInfo w;
  w.shape = want;
  w.dtype = r.info->dtype;
  return InvalidArgument(where(r) + " has shape " + r.info->shape_string() + ", expected " + w.shape_string());
}

float scalar(const TensorRef& r, int64_t i) {
  const uint8_t* p = r.data() + i * st_dtype_size(r.info->dtype);
  uint16_t h = 0;
  float f = 0;
  switch (r.info->dtype) {
    case StDType::kF32: std::memcpy(&f, p, 4); return f;
    case StDType::kF16: std::memcpy(&h, p, 2); return fp16_to_f32(h);
    case StDType::kBF16: std::memcpy(&h, p, 2); return bf16_to_f32(h);
    default: return 0.0f;
  }
}
constexpr std::initializer_list<StDType> kFloats = {StDType::kF32, StDType::kF16, StDType::kBF16};

std::vector<float> to_f32(const TensorRef& r) {
  std::vector<float> v(size_t(r.info->numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scalar(r, int64_t(i));
  return v;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<int32_t> i32s(const TensorRef& r) {
  std::vector<int32_t> v(size_t(r.info->numel()));
  std::memcpy(v.data(), r.data(), v.size() * 4);  // the data may be unaligned in the file
  return v;
}

}  // namespace

Result<std::optional<HostTensor>> Weights::load_linear(const std::string& prefix, const std::string& suffix, const TensorSpec& spec) {
  using Opt = std::optional<HostTensor>;
  auto done = [](Result<HostTensor> h) -> Result<Opt> {
    if (!h.ok()) return h.status();
    return Opt(std::move(h).value());
  };
  const TensorRef w = ckpt_.find(prefix + "." + suffix);
  const bool two_d = spec.shape.size() == 2;
  const int64_t n = two_d ? spec.shape[0] : 0, k = two_d ? spec.shape[1] : 0;
  if (w.file && (suffix != "weight" || !two_d)) {
    // Norm weights and biases: small, widened to f32 so every backend reads them alike. A bias
    // of an NVFP4 weight is divided by its global scale, which the graph multiplies back.
    TS_RETURN_IF_ERROR(expect(w, spec.shape, kFloats));
    std::vector<float> v = to_f32(w);
    if (suffix == "bias") {
      auto it = weight_scales_.find(spec.name.substr(0, spec.name.rfind('.')) + ".weight");
      if (it != weight_scales_.end())
        for (float& x : v) x /= it->second;
    }
    return done(owned(spec, DType::kF32, f32_bytes(v), 1.0f));
  }
  // Only weights come in quantised forms; an absent bias or norm is just absent.
  if (!w.file && (suffix != "weight" || !two_d)) return Opt();
  if (w.file) {
    const StDType dt = w.info->dtype;
    if (dt == StDType::kF32 || dt == StDType::kF16 || dt == StDType::kBF16) {
      TS_RETURN_IF_ERROR(expect(w, spec.shape, kFloats));
      const DType ours = dt == StDType::kF32 ? DType::kF32 : dt == StDType::kF16 ? DType::kF16 : DType::kBF16;
      if (w.info->offset % uint64_t(st_dtype_size(dt)) != 0) {  // misaligned in the file: copy
        return done(owned(spec, ours, std::vector<uint8_t>(w.data(), w.data() + w.info->nbytes), 1.0f));
      }
      HostTensor h;
      h.dtype = ours;
      h.shape = w.info->shape;
      h.data = w.data();
      h.nbytes = w.info->nbytes;
      h.region = w.file->base();
      h.region_bytes = w.file->size();
      h.keepalive = w.file->mapping();
      h.region_is_file = true;
      return Opt(std::move(h));
    }
    if (dt == StDType::kF8_E4M3 || dt == StDType::kF8_E5M2) return done(load_fp8(prefix, w, spec));
    if (dt == StDType::kU8) return done(load_fp4(prefix, w, spec));
    return Unimplemented(where(w) + ": weight dtype " + st_dtype_name(dt) + " is not supported");
  }
  if (const TensorRef p = ckpt_.find(prefix + ".weight_packed"); p.file) {
    if (p.info->dtype != StDType::kU8)
      return Unimplemented(where(p) + ": compressed-tensors pack-quantized integer weights are not supported (only FP4)");
    return done(load_fp4(prefix, p, spec));
  }
  if (const TensorRef b = ckpt_.find(prefix + "_blocks"); b.file) {
    TS_RETURN_IF_ERROR(expect(b, {n, k / 32, 16}, {StDType::kU8}));
    const TensorRef s = ckpt_.find(prefix + "_scales");
    if (!s.file) return NotFound(ckpt_.dir() + ": tensor '" + prefix + "_scales' is missing (needed by " + prefix + "_blocks)");
    TS_RETURN_IF_ERROR(expect(s, {n, k / 32}, {StDType::kU8, StDType::kF8_E8M0}));
    auto bytes = repack_mxfp4(b.data(), s.data(), n, k);
    if (!bytes.ok()) return bytes.status().with_context(where(b) + ": ");
    return done(owned(spec, DType::kMXFP4, std::move(bytes).value(), 1.0f));
  }
  if (const TensorRef q = ckpt_.find(prefix + ".qweight"); q.file) return done(load_int4(prefix, q, spec));
  return Opt();
}

Result<HostTensor> Weights::load_fp8(const std::string& prefix, const TensorRef& w, const TensorSpec& spec) {
  const int64_t n = spec.shape[0], k = spec.shape[1];
  TS_RETURN_IF_ERROR(expect(w, {n, k}, {StDType::kF8_E4M3, StDType::kF8_E5M2}));
  if (ckpt_.has(prefix + ".weight_scale_inv"))
    return Unimplemented(where(w) + ": block-wise FP8 (weight_scale_inv) is not supported; per-tensor and per-channel are");
  std::vector<float> row_scale(size_t(n), 1.0f);
  if (const TensorRef s = ckpt_.find(prefix + ".weight_scale"); s.file) {
    if (!(s.info->dtype == StDType::kF32 || s.info->dtype == StDType::kF16 || s.info->dtype == StDType::kBF16))
      return InvalidArgument(where(s) + " has dtype " + st_dtype_name(s.info->dtype) + ", expected F32/F16/BF16");
    const std::vector<float> v = to_f32(s);
    if (v.size() == 1) {
      row_scale.assign(size_t(n), v[0]);
    } else if (int64_t(v.size()) == n) {
      row_scale = v;
    } else {
      return Unimplemented(where(s) + " has shape " + s.info->shape_string() +
                           ": only per-tensor ([] or [1]) and per-channel ([N] or [N, 1]) FP8 scales are supported");
    }
  }
  auto bytes = repack_fp8(w.data(), row_scale, n, k);
  if (!bytes.ok()) return bytes.status().with_context(where(w) + ": ");
  return owned(spec, w.info->dtype == StDType::kF8_E4M3 ? DType::kFP8_E4M3 : DType::kFP8_E5M2, std::move(bytes).value(), 1.0f);
}

Result<HostTensor> Weights::load_fp4(const std::string& prefix, const TensorRef& w, const TensorSpec& spec) {
  const int64_t n = spec.shape[0], k = spec.shape[1];
  TS_RETURN_IF_ERROR(expect(w, {n, k / 2}, {StDType::kU8}));
  const TensorRef s = ckpt_.find(prefix + ".weight_scale");
  if (!s.file) return NotFound(ckpt_.dir() + ": tensor '" + prefix + ".weight_scale' is missing (needed by " + w.info->name + ")");
  if (s.info->dtype == StDType::kU8 || s.info->dtype == StDType::kF8_E8M0) {
    TS_RETURN_IF_ERROR(expect(s, {n, k / 32}, {StDType::kU8, StDType::kF8_E8M0}));
    auto bytes = repack_mxfp4(w.data(), s.data(), n, k);
    if (!bytes.ok()) return bytes.status().with_context(where(w) + ": ");
    return owned(spec, DType::kMXFP4, std::move(bytes).value(), 1.0f);
  }
  TS_RETURN_IF_ERROR(expect(s, {n, k / 16}, {StDType::kF8_E4M3}));
  // The global scale: ModelOpt multiplies by weight_scale_2; compressed-tensors divides by
  // weight_global_scale.
  float global = 1.0f;
  if (const TensorRef g = ckpt_.find(prefix + ".weight_scale_2"); g.file) {
    if (g.info->numel() != 1 || g.info->dtype != StDType::kF32) return InvalidArgument(where(g) + " must be one F32 value");
    global = scalar(g, 0);
  } else if (const TensorRef gi = ckpt_.find(prefix + ".weight_global_scale"); gi.file) {
    if (gi.info->numel() != 1 || gi.info->dtype != StDType::kF32) return InvalidArgument(where(gi) + " must be one F32 value");
    global = 1.0f / scalar(gi, 0);
  }
  if (!(global > 0.0f) || !std::isfinite(global))
    return InvalidArgument(where(w) + ": NVFP4 global scale " + std::to_string(global) + " must be positive and finite");
  auto bytes = repack_nvfp4(w.data(), s.data(), n, k);
  if (!bytes.ok()) return bytes.status().with_context(where(w) + ": ");
  if (global != 1.0f) weight_scales_[spec.name] = global;
  return owned(spec, DType::kNVFP4, std::move(bytes).value(), global);
}

Result<HostTensor> Weights::load_int4(const std::string& prefix, const TensorRef& q, const TensorSpec& spec) {
  const int64_t n = spec.shape[0], k = spec.shape[1];
  const bool awq = quant_.method == "awq";
  if (!awq && quant_.method != "gptq")
    return InvalidArgument(where(q) + ": a qweight tensor needs quantization_config.quant_method 'awq' or 'gptq' in config.json (got '" +
                           quant_.method + "')");
  const int g = quant_.group_size;
  if (g <= 0 || k % g != 0 || n % 8 != 0 || k % 8 != 0)
    return InvalidArgument(where(q) + ": group_size " + std::to_string(g) + " does not divide in_features " + std::to_string(k) +
                           " (or a size is not a multiple of 8)");
  const TensorRef z = ckpt_.find(prefix + ".qzeros"), s = ckpt_.find(prefix + ".scales");
  if (!z.file || !s.file) return NotFound(ckpt_.dir() + ": '" + prefix + "' has qweight but no " + (z.file ? "scales" : "qzeros"));
  TS_RETURN_IF_ERROR(expect(q, awq ? std::vector<int64_t>{k, n / 8} : std::vector<int64_t>{k / 8, n}, {StDType::kI32}));
  TS_RETURN_IF_ERROR(expect(z, {k / g, n / 8}, {StDType::kI32}));
  TS_RETURN_IF_ERROR(expect(s, {k / g, n}, kFloats));
  if (const TensorRef gi = ckpt_.find(prefix + ".g_idx"); gi.file) {
    // A trivial g_idx (row k in group k / G) is what non-act-order GPTQ writes; anything else
    // reorders rows, which our blocks cannot express.
    TS_RETURN_IF_ERROR(expect(gi, {k}, {StDType::kI32}));
    const std::vector<int32_t> idx = i32s(gi);
    for (int64_t i = 0; i < k; ++i)
      if (idx[size_t(i)] != i / g) return Unimplemented(where(gi) + ": act-order GPTQ (non-trivial g_idx) is not supported");
  }
  const std::vector<int32_t> qw = i32s(q), qz = i32s(z);
  const std::vector<float> sc = to_f32(s);
  auto bytes = awq ? repack_awq(qw.data(), qz.data(), sc.data(), n, k, g)
                   : repack_gptq(qw.data(), qz.data(), sc.data(), n, k, g, quant_.gptq_v2);
  if (!bytes.ok()) return bytes.status().with_context(where(q) + ": ");
  TS_ASSIGN_OR_RETURN(DType dt, int4_dtype(g));
  return owned(spec, dt, std::move(bytes).value(), 1.0f);
}

namespace {

DType float_dtype(StDType dt) {
  return dt == StDType::kF32 ? DType::kF32 : dt == StDType::kF16 ? DType::kF16 : DType::kBF16;
}

// |shape| without its dims of size 1.
std::vector<int64_t> squeezed(const std::vector<int64_t>& shape) {
  std::vector<int64_t> out;
  for (int64_t d : shape)
    if (d != 1) out.push_back(d);
  return out;
}

}  // namespace

// A tensor by a family's rule (Architecture::hf_tensor): fused experts as row views or gathered
// rows; 1-D and squeezed tensors widened to f32 with their values transformed; anything else
// as stored.
Result<std::optional<HostTensor>> Weights::load_rule(const HfTensor& r, const TensorSpec& spec) {
  using Opt = std::optional<HostTensor>;
  if (r.mxfp4) return load_fused_mxfp4(r, spec);
  const TensorRef t = ckpt_.find(r.name);
  if (!t.file) return Opt();
  if (r.fused_rows > 0) return load_fused_experts(r, t, spec);
  const bool widen = spec.shape.size() == 1 || r.squeeze || r.to_f32 || r.values != HfTensor::Values::kAsIs;
  if (!r.squeeze) {
    TS_RETURN_IF_ERROR(expect(t, spec.shape, kFloats));
  } else {
    TS_RETURN_IF_ERROR(expect(t, t.info->shape, kFloats));  // the dtype
    if (squeezed(t.info->shape) != squeezed(spec.shape)) {
      TensorInfo w;
      w.shape = spec.shape;
      w.dtype = t.info->dtype;
      return InvalidArgument(where(t) + " has shape " + t.info->shape_string() + ", expected " + w.shape_string() +
                             " (dims of size 1 aside)");
    }
  }
  if (!widen) {
    const StDType dt = t.info->dtype;
    if (t.info->offset % uint64_t(st_dtype_size(dt)) != 0) {  // misaligned in the file: copy
      TS_ASSIGN_OR_RETURN(
          HostTensor h, owned(spec, float_dtype(dt), std::vector<uint8_t>(t.data(), t.data() + t.info->nbytes), 1.0f));
      return Opt(std::move(h));
    }
    HostTensor h;
    h.dtype = float_dtype(dt);
    h.shape = spec.shape;
    h.data = t.data();
    h.nbytes = t.info->nbytes;
    h.region = t.file->base();
    h.region_bytes = t.file->size();
    h.keepalive = t.file->mapping();
    h.region_is_file = true;
    return Opt(std::move(h));
  }
  std::vector<float> v = to_f32(t);
  switch (r.values) {
    case HfTensor::Values::kAsIs:
      break;
    case HfTensor::Values::kPlusOne:
      for (float& x : v) x = 1.0f + x;
      break;
    case HfTensor::Values::kNegExp:
      for (float& x : v) x = float(-std::exp(double(x)));
      break;
  }
  TS_ASSIGN_OR_RETURN(HostTensor h, owned(spec, DType::kF32, f32_bytes(v), 1.0f));
  return Opt(std::move(h));
}

// Experts fused in one stored tensor [E, fused_rows, ...] (or transposed, [E, inner, fused_rows])
// -> ours [E, rows, ...]: a contiguous row range stays in the mapped shard (a view whose experts
// are fused_rows apart); strided rows (gate and up interleaved), transposed tensors and f32
// conversions are gathered into new memory.
Result<std::optional<HostTensor>> Weights::load_fused_experts(const HfTensor& r, const TensorRef& t,
                                                              const TensorSpec& spec) {
  using Opt = std::optional<HostTensor>;
  const size_t rank = spec.shape.size();
  if (rank < 2 || (r.transposed && rank != 3) || r.row_step < 1 || r.row_begin < 0 ||
      r.row_begin + (spec.shape[1] - 1) * r.row_step >= r.fused_rows)
    return Internal(spec.name + ": fused rows " + std::to_string(r.row_begin) + " + i * " + std::to_string(r.row_step) +
                    " outside " + std::to_string(r.fused_rows));
  std::vector<int64_t> want = spec.shape;
  if (r.transposed) {
    want = {spec.shape[0], spec.shape[2], r.fused_rows};
  } else {
    want[1] = r.fused_rows;
  }
  TS_RETURN_IF_ERROR(expect(t, want, kFloats));
  const StDType dt = t.info->dtype;
  const int64_t E = spec.shape[0], rows = spec.shape[1], esz = st_dtype_size(dt);
  int64_t inner = 1;
  for (size_t i = 2; i < rank; ++i) inner *= spec.shape[i];
  const int64_t row_bytes = inner * esz;
  if (!r.transposed && !r.to_f32 && r.row_step == 1 && t.info->offset % uint64_t(esz) == 0) {
    HostTensor h;
    h.dtype = float_dtype(dt);
    h.shape = spec.shape;
    h.data = t.data() + r.row_begin * row_bytes;
    h.nbytes = size_t(E * rows * row_bytes);
    h.stride0 = rows == r.fused_rows || E == 1 ? 0 : r.fused_rows * row_bytes;
    h.region = t.file->base();
    h.region_bytes = t.file->size();
    h.keepalive = t.file->mapping();
    h.region_is_file = true;
    return Opt(std::move(h));
  }
  // The stored element of our (e, i, j).
  auto src = [&](int64_t e, int64_t i, int64_t j) {
    const int64_t row = r.row_begin + i * r.row_step;
    return r.transposed ? (e * inner + j) * r.fused_rows + row : (e * r.fused_rows + row) * inner + j;
  };
  if (r.to_f32) {
    const std::vector<float> all = to_f32(t);
    std::vector<float> v(size_t(E * rows * inner));
    for (int64_t e = 0; e < E; ++e)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < inner; ++j) v[size_t((e * rows + i) * inner + j)] = all[size_t(src(e, i, j))];
    TS_ASSIGN_OR_RETURN(HostTensor h, owned(spec, DType::kF32, f32_bytes(v), 1.0f));
    return Opt(std::move(h));
  }
  std::vector<uint8_t> out(size_t(E * rows * row_bytes));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t i = 0; i < rows; ++i) {
      uint8_t* dst = out.data() + (e * rows + i) * row_bytes;
      if (!r.transposed) {
        std::memcpy(dst, t.data() + src(e, i, 0) * esz, size_t(row_bytes));
        continue;
      }
      for (int64_t j = 0; j < inner; ++j) std::memcpy(dst + j * esz, t.data() + src(e, i, j) * esz, size_t(esz));
    }
  }
  TS_ASSIGN_OR_RETURN(HostTensor h, owned(spec, float_dtype(dt), std::move(out), 1.0f));
  return Opt(std::move(h));
}

// Experts fused in MXFP4 blocks (HfTensor::mxfp4): each expert's rows gathered, then repacked.
Result<std::optional<HostTensor>> Weights::load_fused_mxfp4(const HfTensor& r, const TensorSpec& spec) {
  using Opt = std::optional<HostTensor>;
  const TensorRef b = ckpt_.find(r.name + "_blocks");
  if (!b.file) return Opt();
  const TensorRef s = ckpt_.find(r.name + "_scales");
  if (!s.file)
    return NotFound(ckpt_.dir() + ": tensor '" + r.name + "_scales' is missing (needed by " + r.name + "_blocks)");
  if (spec.shape.size() != 3 || r.row_step < 1 || r.row_begin < 0 ||
      r.row_begin + (spec.shape[1] - 1) * r.row_step >= r.fused_rows)
    return Internal(spec.name + ": fused MXFP4 rows " + std::to_string(r.row_begin) + " + i * " +
                    std::to_string(r.row_step) + " outside " + std::to_string(r.fused_rows));
  const int64_t E = spec.shape[0], rows = spec.shape[1], k = spec.shape[2];
  if (k % 32 != 0)
    return InvalidArgument(where(b) + ": rows of " + std::to_string(k) +
                           " elements are no whole number of 32-element MXFP4 blocks");
  const int64_t nb = k / 32;
  TS_RETURN_IF_ERROR(expect(b, {E, r.fused_rows, nb, 16}, {StDType::kU8}));
  TS_RETURN_IF_ERROR(expect(s, {E, r.fused_rows, nb}, {StDType::kU8, StDType::kF8_E8M0}));
  std::vector<uint8_t> all, packed(size_t(rows * nb * 16)), scales(size_t(rows * nb));
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t row = e * r.fused_rows + r.row_begin + i * r.row_step;
      std::memcpy(packed.data() + i * nb * 16, b.data() + row * nb * 16, size_t(nb * 16));
      std::memcpy(scales.data() + i * nb, s.data() + row * nb, size_t(nb));
    }
    auto bytes = repack_mxfp4(packed.data(), scales.data(), rows, k);
    if (!bytes.ok()) return bytes.status().with_context(where(b) + ": ");
    all.insert(all.end(), bytes.value().begin(), bytes.value().end());
  }
  TS_ASSIGN_OR_RETURN(HostTensor h, owned(spec, DType::kMXFP4, std::move(all), 1.0f));
  return Opt(std::move(h));
}

}  // namespace tessera::safetensors

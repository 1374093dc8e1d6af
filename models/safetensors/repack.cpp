#include "models/safetensors/repack.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "quant/fp4.h"
#include "quant/half.h"
#include "quant/int_group.h"

namespace tessera::safetensors {

namespace {

// AWQ stores the 8 columns of a pack in the nibble order 0, 2, 4, 6, 1, 3, 5, 7 (nibble i holds
// column kAwqOrder[i]); column j therefore sits in nibble kAwqNibble[j].
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int nib(int32_t word, int i) { return int((uint32_t(word) >> (4 * i)) & 15u); }

// f16 bits of |s|, which must convert exactly (our INT4 blocks keep an f16 scale).
Result<uint16_t> exact_f16(float s, int64_t row, int64_t group) {
  const uint16_t h = f32_to_fp16(s);
  if (fp16_to_f32(h) != s && !(s != s))
    return InvalidArgument("scale " + std::to_string(s) + " (row " + std::to_string(row) + ", group " + std::to_string(group) +
                           ") is not representable in f16");
  return h;
}

// Builds an INT4 tensor [N, K] from per-element codes and per-group zero/scale getters.
template <class CodeFn, class ZeroFn>
Result<std::vector<uint8_t>> build_int4(int64_t n, int64_t k, int group, const float* scales, CodeFn code, ZeroFn zero) {
  TS_ASSIGN_OR_RETURN(DType dt, int4_dtype(group));
  const int64_t groups = k / group, block_bytes = dtype_traits(dt).block_bytes;
  std::vector<uint8_t> out(size_t(n * groups * block_bytes));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t* b = out.data() + (r * groups + g) * block_bytes;
      TS_ASSIGN_OR_RETURN(uint16_t d, exact_f16(scales[g * n + r], r, g));
      const int z = zero(g, r);
      if (z < 0 || z > 15)
        return InvalidArgument("zero point " + std::to_string(z) + " (row " + std::to_string(r) + ", group " + std::to_string(g) +
                               ") is outside [0, 15]");
      std::memcpy(b, &d, 2);
      b[2] = uint8_t(z);
      b[3] = 0;
      for (int j = 0; j < group / 2; ++j) {
        const int64_t k0 = g * group + j;
        b[4 + j] = uint8_t(code(k0, r) | (code(k0 + group / 2, r) << 4));
      }
    }
  }
  return out;
}

Status check_group(int64_t k, int group) {
  if (group <= 0 || k % group != 0)
    return InvalidArgument("in_features " + std::to_string(k) + " is not a multiple of the group size " + std::to_string(group));
  return OkStatus();
}

}  // namespace

Result<DType> int4_dtype(int group) {
  switch (group) {
    case 32: return DType::kINT4_G32;
    case 64: return DType::kINT4_G64;
    case 128: return DType::kINT4_G128;
    default:
      return Unimplemented("INT4 group size " + std::to_string(group) + " (supported: 32, 64, 128)");
  }
}

Result<std::vector<uint8_t>> repack_fp8(const uint8_t* codes, const std::vector<float>& row_scale, int64_t n, int64_t k) {
  if (k % 32 != 0) return InvalidArgument("FP8 rows of " + std::to_string(k) + " elements: need a multiple of 32");
  const int64_t row = 4 + k;
  std::vector<uint8_t> out(size_t(n * row));
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(out.data() + r * row, &row_scale[size_t(r)], 4);
    std::memcpy(out.data() + r * row + 4, codes + r * k, size_t(k));
  }
  return out;
}

Result<std::vector<uint8_t>> repack_awq(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t n, int64_t k,
                                        int group) {
  TS_RETURN_IF_ERROR(check_group(k, group));
  const int64_t np = n / 8;
  auto code = [&](int64_t kk, int64_t col) { return nib(qweight[kk * np + col / 8], kAwqNibble[col % 8]); };
  auto zero = [&](int64_t g, int64_t col) { return nib(qzeros[g * np + col / 8], kAwqNibble[col % 8]); };
  return build_int4(n, k, group, scales, code, zero);
}

Result<std::vector<uint8_t>> repack_gptq(const int32_t* qweight, const int32_t* qzeros, const float* scales, int64_t n, int64_t k,
                                         int group, bool v2) {
  TS_RETURN_IF_ERROR(check_group(k, group));
  const int64_t np = n / 8;
  auto code = [&](int64_t kk, int64_t col) { return nib(qweight[(kk / 8) * n + col], int(kk % 8)); };
  // v1 writes zero - 1; a stored 15 would mean 16, which 4-bit codes cannot reach.
  auto zero = [&](int64_t g, int64_t col) { return nib(qzeros[g * np + col / 8], int(col % 8)) + (v2 ? 0 : 1); };
  return build_int4(n, k, group, scales, code, zero);
}

Result<std::vector<uint8_t>> repack_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t k) {
  if (k % kQKMXFP4 != 0) return InvalidArgument("MXFP4 rows of " + std::to_string(k) + " elements: need a multiple of 32");
  const int64_t blocks = k / kQKMXFP4;
  std::vector<uint8_t> out(size_t(n * blocks) * sizeof(BlockMXFP4));
  auto* y = reinterpret_cast<BlockMXFP4*>(out.data());
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = packed + r * (k / 2);
    for (int64_t b = 0; b < blocks; ++b) {
      BlockMXFP4& blk = y[r * blocks + b];
      blk.e = scales[r * blocks + b];
      // Checkpoint: element 2i low, 2i+1 high. Ours: element j low, j + 16 high in qs[j].
      auto e2m1 = [&](int j) { return (row[b * 16 + j / 2] >> (4 * (j & 1))) & 15; };
      for (int j = 0; j < 16; ++j) blk.qs[j] = uint8_t(e2m1(j) | (e2m1(j + 16) << 4));
    }
  }
  return out;
}

Result<std::vector<uint8_t>> repack_nvfp4(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t k) {
  if (k % kQKNVFP4 != 0) return InvalidArgument("NVFP4 rows of " + std::to_string(k) + " elements: need a multiple of 64");
  const int64_t blocks = k / kQKNVFP4, subs = k / kNVFP4Sub;
  std::vector<uint8_t> out(size_t(n * blocks) * sizeof(BlockNVFP4));
  auto* y = reinterpret_cast<BlockNVFP4*>(out.data());
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = packed + r * (k / 2);
    for (int64_t b = 0; b < blocks; ++b) {
      BlockNVFP4& blk = y[r * blocks + b];
      for (int s = 0; s < 4; ++s) {
        const uint8_t sc = scales[r * subs + b * 4 + s];
        // Our UE4M3 ignores the sign bit, and 0x7F reads as 0 where E4M3FN has NaN.
        if ((sc & 0x80) || sc == 0x7F) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02X", unsigned(sc));
          return InvalidArgument(std::string("NVFP4 scale byte ") + hex + " (row " + std::to_string(r) + ", sub-block " +
                                 std::to_string(b * 4 + s) + ") is negative or NaN");
        }
        blk.d[s] = sc;
        const int64_t base = (b * 64 + s * 16) / 2;  // byte of this sub-block's first element
        auto e2m1 = [&](int j) { return (row[base + j / 2] >> (4 * (j & 1))) & 15; };
        for (int l = 0; l < 8; ++l) blk.qs[8 * s + l] = uint8_t(e2m1(l) | (e2m1(l + 8) << 4));
      }
    }
  }
  return out;
}

}  // namespace tessera::safetensors

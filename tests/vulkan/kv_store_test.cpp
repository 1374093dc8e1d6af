// The attention store stage's 8-bit KV encoders (shaders/kv_encode.glsl) against quant/'s
// quantize_row, byte for byte: rows of K and V go through one attention call into shuffled
// cache slots (some tokens are padding, slot -1), the caches come back as raw bytes, and every
// byte must equal the reference's: the f32 scale header and each code of every stored row, and
// the untouched bytes of every other row. The conformance suite compares attention outputs
// within a tolerance; this catches a scale or a code that is off by one rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "backends/vulkan/device.h"
#include "quant/fp8.h"
#include "tests/support/test_support.h"
#include "tests/vulkan/first_device.h"

namespace tessera::vulkan {
namespace {

constexpr int64_t kHkv = 2, kBlockSize = 4, kBlocks = 12, kTokens = 40;

// Midpoints between neighbouring FP8 E4M3 values (ties, which round to the even code) and the
// largest value 448, so that scale = 448 / 448 = 1 and the codes see the ties unchanged.
void fp8_tie_row(std::vector<float>& r) {
  for (size_t i = 0; i < r.size(); ++i) {
    const uint8_t c = uint8_t((i * 37) % 0x7e);
    const float mid = 0.5f * (fp8_e4m3_to_f32(c) + fp8_e4m3_to_f32(uint8_t(c + 1)));
    r[i] = (i % 2 ? -1.0f : 1.0f) * mid;
  }
  r[0] = 448.0f;
}

// Values k + 0.5 (ties, rounded away from zero) beside 127, so that scale = 1.
void int8_tie_row(std::vector<float>& r) {
  for (size_t i = 0; i < r.size(); ++i) r[i] = (i % 2 ? -1.0f : 1.0f) * (float(i % 127) + 0.5f);
  r[1] = -127.0f;
}

// Row |i| of a batch: each kind of row the encoders must get right, in turn.
std::vector<float> make_row(testing::Rng& rng, int64_t i, int64_t D, DType cache) {
  std::vector<float> r = testing::random_floats(rng, D);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::uniform_int_distribution<int> exp(-30, 30);
  switch (i % 12) {
    case 0: break;                                               // uniform [-1, 1)
    case 1: for (float& x : r) x = std::ldexp(x, exp(rng)); break;  // magnitudes 2^-30 .. 2^30
    case 2: r = testing::outlier_floats(rng, D); break;          // x100 outliers
    case 3: r[size_t(rng() % uint64_t(D))] = 3.0e4f; break;       // one outlier: the rest FP8-subnormal
    case 4: std::fill(r.begin(), r.end(), 0.0f); break;           // all zero: scale 0
    case 5: std::fill(r.begin(), r.end(), -0.0f); break;          // all -0
    case 6: for (size_t c = 0; c < r.size(); c += 3) r[c] = -0.0f; break;  // -0 among values
    case 7: cache == DType::kFP8_E4M3 ? fp8_tie_row(r) : int8_tie_row(r); break;
    case 8: for (float& x : r) x = std::ldexp(x, -132); break;    // f32-subnormal values and scale
    case 9: for (float& x : r) x = std::ldexp(x, 120); break;     // near the f32 maximum
    case 10: r[3] = nan; r[7] = -nan; break;                      // NaNs (the absmax skips them)
    case 11: r[5] = -inf; r[9] = (i / 12) % 2 ? inf : 1.0f; break;  // infinities: scale inf
  }
  return r;
}

std::string hex(uint8_t b) {
  const char* d = "0123456789abcdef";
  return std::string("0x") + d[b >> 4] + d[b & 15];
}

// "" when |got| equals |want| byte for byte, else the first mismatch, by cache row and byte.
std::string compare_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int64_t row_bytes,
                          const std::vector<float>& rows_in, const std::vector<int64_t>& src_of, int64_t D) {
  if (got.size() != want.size())
    return "got " + std::to_string(got.size()) + " bytes, want " + std::to_string(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    const int64_t row = int64_t(i) / row_bytes, b = int64_t(i) % row_bytes;
    std::string what = "cache row " + std::to_string(row) + " byte " + std::to_string(b) + ": got " + hex(got[i]) +
                       ", want " + hex(want[i]);
    const int64_t src = src_of[size_t(row)];
    if (src >= 0 && b >= 4)
      what += " (element " + std::to_string(b - 4) + " of input row " + std::to_string(src) + " = " +
              std::to_string(rows_in[size_t(src * D + b - 4)]) + ")";
    else if (src >= 0)
      what += " (the scale header of input row " + std::to_string(src) + ")";
    return what;
  }
  return "";
}

// One attention call storing kTokens tokens (K and V rows of [kHkv, D]) with |act| activations
// into |cache| caches; compares both caches' bytes with quant/'s encoding of the rows.
void check_store(Device& dev, DType act, DType cache, int64_t D, uint64_t seed) {
  SCOPED_TRACE(std::string("act=") + dtype_name(act) + " cache=" + dtype_name(cache) + " D=" + std::to_string(D) +
               " seed=" + std::to_string(seed));
  testing::Rng rng(seed);
  const int64_t n_rows = kTokens * kHkv, row_bytes = dtype_row_bytes(cache, D);
  // K and V rows as the device sees them: rounded to |act| (exactly representable in f32).
  std::vector<float> kv_in[2];
  std::vector<uint8_t> kv_bytes[2];
  const Tensor act_desc = Tensor::make(act, {kTokens, kHkv, D});
  for (int which = 0; which < 2; ++which) {
    std::vector<float> v;
    for (int64_t r = 0; r < n_rows; ++r) {
      const std::vector<float> row = make_row(rng, r + which, D, cache);
      v.insert(v.end(), row.begin(), row.end());
    }
    kv_bytes[which] = testing::encode(act_desc, v);
    const std::vector<double> d = testing::decode(act_desc, kv_bytes[which].data());
    kv_in[which].assign(d.begin(), d.end());
  }
  // Slots: a shuffle of the cache's, every 7th token padding (-1, stores nothing).
  std::vector<int32_t> slots(static_cast<size_t>(kBlocks * kBlockSize));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(size_t(kTokens));
  for (size_t t = 3; t < slots.size(); t += 7) slots[t] = -1;
  // The caches start as random bytes; what the reference leaves there must stay.
  const Tensor cache_desc = Tensor::make(cache, {kBlocks, kBlockSize, kHkv, D});
  std::vector<uint8_t> initial(size_t(cache_desc.nbytes()));
  for (auto& b : initial) b = uint8_t(rng());
  std::vector<uint8_t> want[2] = {initial, initial};
  std::vector<int64_t> src_of(size_t(kBlocks * kBlockSize * kHkv), -1);
  for (int64_t t = 0; t < kTokens; ++t) {
    if (slots[size_t(t)] < 0) continue;
    for (int64_t h = 0; h < kHkv; ++h) {
      const int64_t crow = int64_t(slots[size_t(t)]) * kHkv + h, src = t * kHkv + h;
      src_of[size_t(crow)] = src;
      for (int which = 0; which < 2; ++which)
        dtype_traits(cache).quantize_row(kv_in[which].data() + src * D, want[which].data() + crow * row_bytes, D);
    }
  }
  // One sequence of all the tokens over blocks 0..: the attend stage reads what was stored.
  Graph g;
  auto put = [&](const Tensor& desc, const void* bytes) {
    auto t = upload_new(dev, desc, bytes);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? g.input(*t) : kNoValue;
  };
  const int64_t n_seq_blocks = (kTokens + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> tables(static_cast<size_t>(n_seq_blocks));
  std::iota(tables.begin(), tables.end(), 0);
  const int32_t qstart[] = {0, int32_t(kTokens)}, lens[] = {int32_t(kTokens)};
  const std::vector<uint8_t> q = testing::encode(act_desc, testing::random_floats(rng, n_rows * D));
  const ValueId kc = put(cache_desc, initial.data()), vc = put(cache_desc, initial.data());
  const ValueId out = g.attention({put(act_desc, q.data()), put(act_desc, kv_bytes[0].data()),
                                   put(act_desc, kv_bytes[1].data()), kc, vc,
                                   put(Tensor::make(DType::kI32, {kTokens}), slots.data()),
                                   put(Tensor::make(DType::kI32, {2}), qstart),
                                   put(Tensor::make(DType::kI32, {1}), lens),
                                   put(Tensor::make(DType::kI32, {1, n_seq_blocks}), tables.data())},
                                  AttentionParams{});
  ASSERT_TRUE(g.status().ok()) << g.status().to_string();
  g.mark_output(out);
  Status s = dev.compute(g);
  if (s.ok()) s = dev.synchronize();
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int which = 0; which < 2; ++which) {
    std::vector<uint8_t> got(initial.size());
    ASSERT_TRUE(dev.download(g.tensor(which == 0 ? kc : vc), got.data(), got.size()).ok());
    EXPECT_EQ(compare_bytes(got, want[which], row_bytes, kv_in[which], src_of, D), "") << (which == 0 ? "K" : "V")
                                                                                      << " cache";
  }
}

TEST(VulkanKvStore, QuantisesRowsLikeQuantizeRow) {
  auto dev = first_device();
  if (!dev) TESSERA_SKIP_HARDWARE() << "no usable Vulkan device";
  uint64_t seed = 8100;
  for (DType cache : {DType::kFP8_E4M3, DType::kINT8_PC}) {
    for (DType act : {DType::kF32, DType::kF16, DType::kBF16}) {
      ASSERT_TRUE(dev->supports(OpKind::kAttention, act, cache)) << dtype_name(act) << " " << dtype_name(cache);
      for (int64_t D : {32, 64, 128}) check_store(*dev, act, cache, D, ++seed);
    }
  }
}

}  // namespace
}  // namespace tessera::vulkan

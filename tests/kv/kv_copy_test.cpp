// KV block copies through the HAL's batched copy: a fork's copy-on-write, a swap-out and a
// swap-in are each ONE Device::copy over every layer and block, with no upload or download
// (no host round trip), on the CPU and on a Vulkan device whose memory the host cannot address.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/kv/kv_cache.h"
#include "tests/kv/counting_device.h"
#include "tests/kv/test_devices.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

using testing::CountingDevice;

std::vector<std::pair<std::string, DevicePtr>> devices() { return testing::cpu_and_unmapped_vulkan(1); }

class KvCopy : public ::testing::Test {
 protected:
  static constexpr int kLayers = 3, kBlocks = 8;
  void fill(CountingDevice& dev, KvCache& kv, uint32_t seed) {
    std::mt19937 rng(seed);
    for (int l = 0; l < kLayers; ++l)
      for (const Tensor* t : {&kv.k(l), &kv.v(l)}) {
        std::vector<uint8_t> bytes(size_t(t->nbytes()));
        for (auto& b : bytes) b = uint8_t(rng());
        ASSERT_TRUE(dev.upload(*t, bytes.data(), bytes.size()).ok());
        host_[t] = bytes;
      }
  }
  // Block |b| of tensor |t| as it is on the device.
  std::vector<uint8_t> block(CountingDevice& dev, const Tensor& t, int b) {
    std::vector<uint8_t> all(size_t(t.nbytes()));
    EXPECT_TRUE(dev.download(t, all.data(), all.size()).ok());
    const size_t bb = all.size() / kBlocks;
    return {all.begin() + std::ptrdiff_t(size_t(b) * bb), all.begin() + std::ptrdiff_t(size_t(b + 1) * bb)};
  }
  std::vector<uint8_t> original(const Tensor& t, int b) {
    const auto& all = host_[&t];
    const size_t bb = all.size() / kBlocks;
    return {all.begin() + std::ptrdiff_t(size_t(b) * bb), all.begin() + std::ptrdiff_t(size_t(b + 1) * bb)};
  }
  std::map<const Tensor*, std::vector<uint8_t>> host_;
};

TEST_F(KvCopy, ForkSwapOutSwapInAreOneBatchedCopyEach) {
  for (auto& [name, inner] : devices()) {
    for (DType dtype : {DType::kF16, DType::kINT8_PC}) {
      SCOPED_TRACE(name + " " + dtype_name(dtype));
      CountingDevice dev(inner);
      KvCacheConfig c;
      c.n_layers = kLayers; c.n_kv_heads = 2; c.head_dim = 32; c.block_size = 4; c.n_blocks = kBlocks; c.dtype = dtype;
      auto kv = KvCache::create(dev, c);
      ASSERT_TRUE(kv.ok()) << kv.status().to_string();
      ASSERT_TRUE((*kv)->reserve_swap(4).ok());
      fill(dev, **kv, 4242);
      dev.reset();

      const std::vector<std::pair<BlockId, BlockId>> fork = {{1, 5}, {2, 6}};
      ASSERT_TRUE((*kv)->copy_blocks(fork).ok());
      EXPECT_EQ(dev.copies, 1);
      EXPECT_EQ(dev.regions_copied, 2 * 2 * kLayers) << "every layer's K and V of both pairs in the one call";

      const std::vector<std::pair<BlockId, int32_t>> out = {{3, 0}, {4, 1}, {0, 3}};
      ASSERT_TRUE((*kv)->swap_out(out).ok());
      EXPECT_EQ(dev.copies, 2);
      // The swapped-out blocks are handed to others and overwritten ...
      const std::vector<std::pair<BlockId, BlockId>> reuse = {{7, 3}, {7, 4}};
      ASSERT_TRUE((*kv)->copy_blocks(reuse).ok());
      EXPECT_EQ(dev.copies, 3);
      // ... and the swapped content comes back into other blocks.
      const std::vector<std::pair<int32_t, BlockId>> in = {{0, 7}, {1, 2}, {3, 1}};
      ASSERT_TRUE((*kv)->swap_in(in).ok());
      EXPECT_EQ(dev.copies, 4);
      EXPECT_EQ(dev.uploads, 0) << "no host round trip";
      EXPECT_EQ(dev.downloads, 0) << "no host round trip";

      for (int l = 0; l < kLayers; ++l)
        for (const Tensor* t : {&(*kv)->k(l), &(*kv)->v(l)}) {
          SCOPED_TRACE(t->name);
          EXPECT_EQ(block(dev, *t, 5), original(*t, 1)) << "fork copy 1 -> 5";
          EXPECT_EQ(block(dev, *t, 6), original(*t, 2)) << "fork copy 2 -> 6";
          EXPECT_EQ(block(dev, *t, 3), original(*t, 7)) << "reused block 3";
          EXPECT_EQ(block(dev, *t, 7), original(*t, 3)) << "swap slot 0 (block 3) -> 7";
          EXPECT_EQ(block(dev, *t, 2), original(*t, 4)) << "swap slot 1 (block 4) -> 2";
          EXPECT_EQ(block(dev, *t, 1), original(*t, 0)) << "swap slot 3 (block 0) -> 1";
        }
    }
  }
}

TEST_F(KvCopy, BadBlocksAndSlotsAreErrorsThatCopyNothing) {
  for (auto& [name, inner] : devices()) {
    SCOPED_TRACE(name);
    CountingDevice dev(inner);
    KvCacheConfig c;
    c.n_layers = 1; c.n_kv_heads = 1; c.head_dim = 8; c.block_size = 4; c.n_blocks = kBlocks; c.dtype = DType::kF32;
    auto kv = KvCache::create(dev, c);
    ASSERT_TRUE(kv.ok());
    ASSERT_TRUE((*kv)->reserve_swap(2).ok());
    dev.reset();
    const std::vector<std::pair<BlockId, BlockId>> bad_copy = {{1, 2}, {3, kBlocks}};
    const Status s = (*kv)->copy_blocks(bad_copy);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("block 8 outside [0, 8)"), std::string::npos) << s.to_string();
    const std::vector<std::pair<BlockId, int32_t>> bad_slot = {{1, 2}};
    EXPECT_NE((*kv)->swap_out(bad_slot).message().find("host slot 2 outside [0, 2)"), std::string::npos);
    EXPECT_EQ(dev.copies, 0) << "nothing is queued when any pair is bad";
  }
}

// Layers of different K/V shapes (Gemma 4: wide global heads, narrow window heads) and layers that
// read another's K/V (KV sharing): each layer's tensors have its own shape, block copies and swaps
// move each layer's own block size, and a sharing layer's k()/v() are its source's tensors.
TEST_F(KvCopy, PerLayerShapesAndSharedLayers) {
  for (auto& [name, inner] : devices()) {
    SCOPED_TRACE(name);
    CountingDevice dev(inner);
    KvCacheConfig c;
    c.n_layers = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.block_size = 4;
    c.n_blocks = kBlocks;
    c.dtype = DType::kF16;
    c.layer_kv_heads = {2, 1, 2, 1};
    c.layer_head_dim = {16, 32, 16, 32};
    c.kv_source = {0, 1, 0, 1};
    auto kv = KvCache::create(dev, c);
    ASSERT_TRUE(kv.ok()) << kv.status().to_string();
    KvCache& k = **kv;
    EXPECT_EQ(k.n_kv_layers(), 2);
    EXPECT_TRUE(k.has_kv(1));
    EXPECT_FALSE(k.has_kv(3));
    EXPECT_EQ(k.k(1).shape[2], 1);
    EXPECT_EQ(k.k(1).shape[3], 32);
    EXPECT_EQ(k.k(2).buffer, k.k(0).buffer) << "layer 2 reads layer 0's K";
    EXPECT_EQ(k.v(3).buffer, k.v(1).buffer) << "layer 3 reads layer 1's V";
    EXPECT_EQ(k.group_block_bytes(false), 2 * (4 * 2 * 16 + 4 * 1 * 32) * 2) << "K and V of layers 0 and 1, f16";
    EXPECT_EQ(k.bytes(), kBlocks * k.group_block_bytes(false));
    ASSERT_TRUE(k.reserve_swap(2).ok());
    EXPECT_EQ(k.swap_bytes(), 2 * k.group_block_bytes(false));
    for (int l : {0, 1}) {
      for (const Tensor* t : {&k.k(l), &k.v(l)}) {
        std::vector<uint8_t> bytes(size_t(t->nbytes()));
        std::mt19937 rng(uint32_t(7 + l));
        for (auto& b : bytes) b = uint8_t(rng());
        ASSERT_TRUE(dev.upload(*t, bytes.data(), bytes.size()).ok());
        host_[t] = bytes;
      }
    }
    dev.reset();
    const std::vector<std::pair<BlockId, BlockId>> fork = {{1, 5}};
    ASSERT_TRUE(k.copy_blocks(fork).ok());
    EXPECT_EQ(dev.regions_copied, 2 * 2) << "the K and V of the two layers with K/V of their own";
    const std::vector<std::pair<BlockId, int32_t>> out = {{2, 1}};
    ASSERT_TRUE(k.swap_out(out).ok());
    const std::vector<std::pair<int32_t, BlockId>> in = {{1, 6}};
    ASSERT_TRUE(k.swap_in(in).ok());
    for (int l : {0, 1})
      for (const Tensor* t : {&k.k(l), &k.v(l)}) {
        EXPECT_EQ(block(dev, *t, 5), original(*t, 1)) << "layer " << l << ": fork copy 1 -> 5";
        EXPECT_EQ(block(dev, *t, 6), original(*t, 2)) << "layer " << l << ": swap 2 -> slot 1 -> 6";
      }
    // A source must be an earlier layer keeping its own K/V of the same shape.
    for (std::vector<int> bad : {std::vector<int>{0, 1, 3, 1}, std::vector<int>{0, 1, 1, 1}, std::vector<int>{0, 0}}) {
      KvCacheConfig b = c;
      b.kv_source = bad;
      auto r = KvCache::create(dev, b);
      EXPECT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
    }
  }
}

// Device::copy checks every region before queueing any.
TEST(DeviceCopy, OutOfBoundsRegionIsRejectedWhole) {
  for (auto& [name, dev] : devices()) {
    SCOPED_TRACE(name);
    auto a = dev->alloc(256), b = dev->alloc(128, MemoryKind::kHostPinned);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_NE((*b)->host_ptr(), nullptr) << "host-pinned memory is host-addressable";
    std::vector<uint8_t> src(256);
    for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 1);
    Tensor ta = Tensor::make(DType::kI8, {256});
    ta.buffer = *a;
    ASSERT_TRUE(dev->upload(ta, src.data(), src.size()).ok());
    std::memset((*b)->host_ptr(), 0, 128);
    const CopyRegion ok{a->get(), 16, b->get(), 0, 64}, bad{a->get(), 200, b->get(), 64, 64};
    const CopyRegion both[] = {ok, bad};
    auto r = dev->copy(both);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("copy region 1"), std::string::npos) << r.status().to_string();
    ASSERT_TRUE(dev->synchronize().ok());
    EXPECT_EQ(static_cast<uint8_t*>((*b)->host_ptr())[0], 0) << "the valid region was not copied either";
    auto e = dev->copy(std::span<const CopyRegion>(&ok, 1));
    ASSERT_TRUE(e.ok());
    ASSERT_TRUE(dev->wait(*e).ok());
    EXPECT_EQ(std::memcmp((*b)->host_ptr(), src.data() + 16, 64), 0);
  }
}

}  // namespace
}  // namespace tessera

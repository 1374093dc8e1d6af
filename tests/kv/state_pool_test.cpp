// RecurrentStatePool (core/kv/state_pool.h): live slots, zeroing, forks, prefix checkpoints with
// LRU eviction and pins, draft snapshots and rollback, swap; every state move is ONE
// Device::copy (counted through a decorator) over every layer and state tensor, checked byte for
// byte against seeded random state, on the CPU and on a Vulkan device whose memory the host
// cannot address.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/kv/state_pool.h"
#include "tests/kv/counting_device.h"
#include "tests/kv/test_devices.h"
#include "tests/support/test_support.h"

namespace tessera {
namespace {

using testing::CountingDevice;
using Bytes = std::vector<uint8_t>;

// Two recurrent layers around an attention layer (1, not listed), mixed dtypes and ranks.
RecurrentStateConfig config(int32_t n_slots, int32_t n_checkpoints) {
  RecurrentStateConfig c;
  c.layers = {{0, {{"conv", DType::kF16, {3, 8}}, {"ssm", DType::kF32, {2, 4, 4}}}},
              {2, {{"ssm", DType::kBF16, {2, 4, 4}}}}};
  c.n_slots = n_slots;
  c.n_checkpoints = n_checkpoints;
  return c;
}
constexpr int64_t kTensors = 3;
constexpr int64_t kSlotBytes = 3 * 8 * 2 + 2 * 4 * 4 * 4 + 2 * 4 * 4 * 2;

// Row |slot| of a live [n_slots, ...] tensor as a contiguous tensor of its own.
Tensor row_of(const Tensor& t, StateSlot slot) {
  Tensor r = t;
  r.shape[0] = 1;
  r.offset += size_t(slot) * size_t(t.stride[0]);
  return r;
}

class StatePool : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    auto all = testing::cpu_and_unmapped_vulkan(1);
    if (size_t(GetParam()) >= all.size()) TESSERA_SKIP_HARDWARE() << "no Vulkan device in this build or on this machine";
    name_ = all[size_t(GetParam())].first;
    dev_ = std::make_unique<CountingDevice>(all[size_t(GetParam())].second);
  }
  std::unique_ptr<RecurrentStatePool> make(int32_t n_slots, int32_t n_checkpoints) {
    auto p = RecurrentStatePool::create(*dev_, config(n_slots, n_checkpoints));
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return p.ok() ? std::move(*p) : nullptr;
  }
  // Writes seeded random bytes (never all zero) into every state of |slot|; returns them.
  Bytes write(RecurrentStatePool& pool, StateSlot slot, uint32_t seed) {
    std::mt19937 rng(seed);
    Bytes all;
    for (const Tensor& t : pool.tensors()) {
      const Tensor r = row_of(t, slot);
      Bytes b(size_t(r.nbytes()));
      for (auto& x : b) x = uint8_t(rng() | 1);  // odd: no byte is zero
      EXPECT_TRUE(dev_->upload(r, b.data(), b.size()).ok());
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  }
  // Every state of |slot| as it is on the device, in tensors() order.
  Bytes read(RecurrentStatePool& pool, StateSlot slot) {
    Bytes all;
    for (const Tensor& t : pool.tensors()) {
      const Tensor r = row_of(t, slot);
      Bytes b(size_t(r.nbytes()));
      EXPECT_TRUE(dev_->download(r, b.data(), b.size()).ok());
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  }
  StateSlot take(RecurrentStatePool& pool) {
    auto s = pool.allocate();
    EXPECT_TRUE(s.has_value());
    return s.value_or(0);
  }
  std::string name_;
  std::unique_ptr<CountingDevice> dev_;
};

INSTANTIATE_TEST_SUITE_P(Devices, StatePool, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param == 0 ? std::string("cpu") : std::string("vulkan"); });

TEST_P(StatePool, TensorsAreLiveViewsWithASlotDimension) {
  auto pool = make(4, 3);
  ASSERT_TRUE(pool);
  ASSERT_EQ(int64_t(pool->tensors().size()), kTensors);
  const Tensor* conv = pool->find(0, "conv");
  const Tensor* ssm2 = pool->find(2, "ssm");
  ASSERT_TRUE(conv && ssm2);
  EXPECT_EQ(conv->name, "conv.0");
  EXPECT_EQ(conv->shape_string(), Tensor::make(DType::kF16, {4, 3, 8}).shape_string());
  EXPECT_EQ(ssm2->dtype, DType::kBF16);
  EXPECT_EQ(ssm2->rank, 4);
  EXPECT_EQ(ssm2->dim(0), 4) << "the graph sees the live slots only";
  EXPECT_EQ(pool->find(1, "ssm"), nullptr) << "layer 1 is an attention layer";
  EXPECT_EQ(pool->find(0, "nope"), nullptr);
  for (const Tensor& t : pool->tensors())
    EXPECT_GE(int64_t(t.buffer->size()), (4 + 3) * t.nbytes() / 4) << t.name << ": room for the checkpoint rows";
  EXPECT_EQ(pool->bytes_per_slot(), kSlotBytes);
  EXPECT_EQ(pool->device_bytes(), (4 + 3) * kSlotBytes);
  const RecurrentStateStats s = pool->stats();
  EXPECT_EQ(s.slots_total, 4);
  EXPECT_EQ(s.checkpoints_total, 3);
  EXPECT_EQ(s.bytes_per_slot, kSlotBytes);
  EXPECT_EQ(s.device_bytes, 7 * kSlotBytes);
}

TEST_P(StatePool, OutOfSlotsIsAWaitAndFreesMakeRoom) {
  auto pool = make(3, 0);
  ASSERT_TRUE(pool);
  dev_->reset();
  std::set<StateSlot> got;
  for (int i = 0; i < 3; ++i) got.insert(take(*pool));
  EXPECT_EQ(got, (std::set<StateSlot>{0, 1, 2}));
  EXPECT_FALSE(pool->allocate().has_value()) << "every slot is live: the caller waits";
  EXPECT_EQ(pool->stats().slots_used, 3);
  EXPECT_EQ(pool->n_free(), 0);
  ASSERT_TRUE(pool->free(1).ok());
  EXPECT_FALSE(pool->is_live(1));
  EXPECT_EQ(pool->allocate().value_or(-1), 1) << "the freed slot is handed out again";
  EXPECT_FALSE(pool->allocate().has_value());
  EXPECT_EQ(dev_->copies, 0) << "allocate and free are bookkeeping only";
}

TEST_P(StatePool, ZeroIsOneCopyOverEveryLayerAndState) {
  auto pool = make(3, 0);
  ASSERT_TRUE(pool);
  const StateSlot a = take(*pool), b = take(*pool), c = take(*pool);
  write(*pool, a, 1);
  write(*pool, b, 2);
  const Bytes c_before = write(*pool, c, 3);
  dev_->reset();
  const StateSlot both[] = {a, b};
  ASSERT_TRUE(pool->zero(both).ok());
  EXPECT_EQ(dev_->copies, 1);
  EXPECT_EQ(dev_->regions_copied, 2 * kTensors);
  EXPECT_EQ(dev_->uploads, 0) << "zeroes come from a device region, not the host";
  EXPECT_EQ(read(*pool, a), Bytes(size_t(kSlotBytes), 0));
  EXPECT_EQ(read(*pool, b), Bytes(size_t(kSlotBytes), 0));
  EXPECT_EQ(read(*pool, c), c_before) << "a slot not named is untouched";
}

TEST_P(StatePool, CheckpointLookupRestoreGivesTheCheckpointedBytes) {
  auto pool = make(2, 2);
  ASSERT_TRUE(pool);
  const StateSlot s = take(*pool), other = take(*pool);
  const Bytes at_boundary = write(*pool, s, 11);
  const BlockHash key = hash_block(0, std::vector<int32_t>(16, 7));
  dev_->reset();
  ASSERT_TRUE(pool->checkpoint(s, key).ok());
  EXPECT_EQ(dev_->copies, 1);
  EXPECT_EQ(dev_->regions_copied, kTensors);
  const Bytes later = write(*pool, s, 12);  // the sequence goes on past the boundary
  ASSERT_NE(later, at_boundary);

  EXPECT_FALSE(pool->lookup(key + 1).has_value());
  auto id = pool->lookup(key);
  ASSERT_TRUE(id.has_value());
  EXPECT_TRUE(pool->contains(key));
  dev_->reset();
  const std::pair<CheckpointId, StateSlot> into[] = {{*id, other}};
  ASSERT_TRUE(pool->restore(into).ok());
  EXPECT_EQ(dev_->copies, 1);
  EXPECT_EQ(dev_->regions_copied, kTensors);
  EXPECT_EQ(dev_->uploads + dev_->downloads, 0) << "no host round trip";
  EXPECT_EQ(read(*pool, other), at_boundary);
  EXPECT_EQ(read(*pool, s), later) << "the checkpoint's source is not touched by the restore";

  // Taking the same key again only refreshes it: it names the same state.
  dev_->reset();
  ASSERT_TRUE(pool->checkpoint(s, key).ok());
  EXPECT_EQ(dev_->copies, 0);
  const RecurrentStateStats st = pool->stats();
  EXPECT_EQ(st.lookups, 2);
  EXPECT_EQ(st.hits, 1);
  EXPECT_EQ(st.misses, 1);
  EXPECT_EQ(st.checkpoints_taken, 1);
  EXPECT_EQ(st.checkpoints_held, 1);
  EXPECT_EQ(st.restores, 1);
}

TEST_P(StatePool, ShortPromptCheckpointUnderAPartialPrefixKey) {
  auto pool = make(2, 1);
  ASSERT_TRUE(pool);
  const std::vector<int32_t> prompt = {5, 9, 2};  // shorter than one block
  const BlockHash key = partial_prefix_key(0, prompt);
  EXPECT_NE(key, hash_block(0, prompt)) << "never a block's hash";
  EXPECT_NE(key, partial_prefix_key(0, std::vector<int32_t>{5, 9}));
  EXPECT_NE(key, partial_prefix_key(hash_block(0, std::vector<int32_t>(4, 1)), prompt)) << "the parent counts";
  EXPECT_EQ(key, partial_prefix_key(0, prompt)) << "deterministic";
  const StateSlot a = take(*pool), b = take(*pool);
  const Bytes end_of_prompt = write(*pool, a, 21);
  ASSERT_TRUE(pool->checkpoint(a, key).ok());
  ASSERT_TRUE(pool->free(a).ok());
  auto id = pool->lookup(partial_prefix_key(0, prompt));
  ASSERT_TRUE(id.has_value()) << "the same prompt later hits";
  const std::pair<CheckpointId, StateSlot> into[] = {{*id, b}};
  ASSERT_TRUE(pool->restore(into).ok());
  EXPECT_EQ(read(*pool, b), end_of_prompt);
}

TEST_P(StatePool, ForkCopiesIntoNFreshSlotsAsOneCopy) {
  auto pool = make(4, 0);
  ASSERT_TRUE(pool);
  const StateSlot src = take(*pool);
  const Bytes state = write(*pool, src, 31);
  dev_->reset();
  auto kids = pool->fork(src, 3);
  ASSERT_TRUE(kids.ok()) << kids.status().to_string();
  ASSERT_TRUE(kids->has_value());
  ASSERT_EQ((*kids)->size(), 3u);
  EXPECT_EQ(dev_->copies, 1);
  EXPECT_EQ(dev_->regions_copied, 3 * kTensors);
  for (StateSlot k : **kids) {
    EXPECT_NE(k, src);
    EXPECT_TRUE(pool->is_live(k));
    EXPECT_EQ(read(*pool, k), state) << "child " << k;
  }
  EXPECT_EQ(read(*pool, src), state);
  // No slot left: all or nothing, and nothing taken.
  ASSERT_TRUE(pool->free((**kids)[0]).ok());
  auto none = pool->fork(src, 2);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value()) << "one free slot for two children: wait";
  EXPECT_EQ(pool->n_free(), 1);
}

TEST_P(StatePool, RollbackRestoresTheStateBeforeTheDrafts) {
  auto pool = make(2, 2);
  ASSERT_TRUE(pool);
  const StateSlot rejected = take(*pool), accepted = take(*pool);
  const Bytes before = write(*pool, rejected, 41);
  write(*pool, accepted, 42);
  dev_->reset();
  const StateSlot drafted[] = {rejected, accepted};
  auto snaps = pool->snapshot(drafted);
  ASSERT_TRUE(snaps.ok()) << snaps.status().to_string();
  ASSERT_TRUE(snaps->has_value());
  EXPECT_EQ(dev_->copies, 1) << "one snapshot copy for the whole step";
  EXPECT_EQ(dev_->regions_copied, 2 * kTensors);
  EXPECT_EQ(pool->stats().checkpoints_pinned, 2);
  const CheckpointId snap_r = (**snaps)[0], snap_a = (**snaps)[1];

  auto more = pool->snapshot(std::span<const StateSlot>(drafted, 1));
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(more->has_value()) << "every row is pinned by a snapshot: run without drafts";

  write(*pool, rejected, 43);  // the verify step ran the drafts
  const Bytes after_accepted = write(*pool, accepted, 44);
  ASSERT_TRUE(pool->rollback(snap_r, rejected).ok());
  EXPECT_EQ(read(*pool, rejected), before);
  ASSERT_TRUE(pool->unpin(snap_a).ok()) << "accepted: the snapshot is released";
  EXPECT_EQ(read(*pool, accepted), after_accepted);
  EXPECT_EQ(pool->stats().checkpoints_held, 0) << "both rows are free again";
  const Status again = pool->rollback(snap_r, rejected);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("no longer held"), std::string::npos) << again.to_string();
}

TEST_P(StatePool, SwapOutAndInAreOneCopyEachWithBytesIntact) {
  auto pool = make(3, 1);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->reserve_swap(2).ok());
  EXPECT_EQ(pool->swap_bytes(), 2 * kSlotBytes);
  const StateSlot a = take(*pool), b = take(*pool);
  const Bytes sa = write(*pool, a, 51), sb = write(*pool, b, 52);
  dev_->reset();
  const std::pair<StateSlot, int32_t> out[] = {{a, 1}, {b, 0}};
  ASSERT_TRUE(pool->swap_out(out).ok());
  EXPECT_EQ(dev_->copies, 1);
  EXPECT_EQ(dev_->regions_copied, 2 * kTensors);
  // The slots go to other sequences, which start from zero ...
  ASSERT_TRUE(pool->free(a).ok());
  ASSERT_TRUE(pool->free(b).ok());
  const StateSlot x = take(*pool), y = take(*pool), z = take(*pool);
  const StateSlot fresh[] = {x, y, z};
  ASSERT_TRUE(pool->zero(fresh).ok());
  ASSERT_TRUE(pool->free(z).ok());
  // ... and the swapped states come back into slots of their own.
  dev_->reset();
  const std::pair<int32_t, StateSlot> in[] = {{1, y}, {0, x}};
  ASSERT_TRUE(pool->swap_in(in).ok());
  EXPECT_EQ(dev_->copies, 1);
  EXPECT_EQ(dev_->regions_copied, 2 * kTensors);
  EXPECT_EQ(dev_->uploads + dev_->downloads, 0) << "no host round trip";
  EXPECT_EQ(read(*pool, y), sa);
  EXPECT_EQ(read(*pool, x), sb);
  EXPECT_EQ(pool->stats().swap_bytes, 2 * kSlotBytes);
}

TEST_P(StatePool, LeastRecentlyUsedCheckpointIsEvicted) {
  auto pool = make(1, 2);
  ASSERT_TRUE(pool);
  const StateSlot s = take(*pool);
  const BlockHash k1 = 101, k2 = 102, k3 = 103;
  const Bytes s1 = write(*pool, s, 61);
  ASSERT_TRUE(pool->checkpoint(s, k1).ok());
  write(*pool, s, 62);
  ASSERT_TRUE(pool->checkpoint(s, k2).ok());
  const auto id2 = pool->lookup(k2);
  ASSERT_TRUE(pool->lookup(k1).has_value());  // k1 is now the most recently used
  write(*pool, s, 63);
  ASSERT_TRUE(pool->checkpoint(s, k3).ok());
  EXPECT_TRUE(pool->contains(k1));
  EXPECT_FALSE(pool->contains(k2)) << "k2 was the least recently used";
  EXPECT_TRUE(pool->contains(k3));
  EXPECT_EQ(pool->stats().evictions, 1);
  EXPECT_EQ(pool->stats().checkpoints_held, 2);

  const std::pair<CheckpointId, StateSlot> stale[] = {{*id2, s}};
  dev_->reset();
  const Status st = pool->restore(stale);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("evicted or released"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("now holds generation"), std::string::npos) << "its row holds k3: " << st.to_string();
  EXPECT_EQ(dev_->copies, 0);
  const std::pair<CheckpointId, StateSlot> k1_in[] = {{*pool->lookup(k1), s}};
  ASSERT_TRUE(pool->restore(k1_in).ok());
  EXPECT_EQ(read(*pool, s), s1) << "the survivor still holds its own state";
}

TEST_P(StatePool, PinnedCheckpointIsNotEvicted) {
  auto pool = make(2, 2);
  ASSERT_TRUE(pool);
  const StateSlot s = take(*pool), t = take(*pool);
  const BlockHash k1 = 201, k2 = 202, k3 = 203, k4 = 204;
  const Bytes s1 = write(*pool, s, 71);
  ASSERT_TRUE(pool->checkpoint(s, k1).ok());
  const auto id1 = pool->lookup(k1);
  ASSERT_TRUE(id1.has_value());
  ASSERT_TRUE(pool->pin(*id1).ok());  // to be restored this step
  write(*pool, s, 72);
  ASSERT_TRUE(pool->checkpoint(s, k2).ok());  // now k1 is the least recently used
  write(*pool, s, 73);
  ASSERT_TRUE(pool->checkpoint(s, k3).ok());
  EXPECT_TRUE(pool->contains(k1)) << "pinned: not evicted although least recently used";
  EXPECT_FALSE(pool->contains(k2));
  EXPECT_EQ(pool->stats().checkpoints_pinned, 1);

  const auto id3 = pool->lookup(k3);
  ASSERT_TRUE(pool->pin(*id3).ok());
  dev_->reset();
  ASSERT_TRUE(pool->checkpoint(s, k4).ok()) << "a cache entry is never owed";
  EXPECT_FALSE(pool->contains(k4));
  EXPECT_EQ(pool->stats().checkpoints_skipped, 1);
  EXPECT_EQ(dev_->copies, 0);

  const std::pair<CheckpointId, StateSlot> in[] = {{*id1, t}};
  ASSERT_TRUE(pool->restore(in).ok());
  EXPECT_EQ(read(*pool, t), s1);
  ASSERT_TRUE(pool->unpin(*id1).ok());
  ASSERT_TRUE(pool->checkpoint(s, k4).ok());
  EXPECT_TRUE(pool->contains(k4));
  EXPECT_FALSE(pool->contains(k1)) << "unpinned, it is evictable again";
  EXPECT_TRUE(pool->contains(k3));
}

// More new keys in one call than rows: a row taken earlier in the call is never reused by a
// later pair (two regions of one copy writing the same row).
TEST_P(StatePool, OneCallNeverTakesARowTwice) {
  auto pool = make(3, 2);
  ASSERT_TRUE(pool);
  const StateSlot a = take(*pool), b = take(*pool), c = take(*pool);
  const Bytes sa = write(*pool, a, 81), sb = write(*pool, b, 82);
  write(*pool, c, 83);
  dev_->reset();
  const std::pair<StateSlot, BlockHash> pairs[] = {{a, 1}, {b, 2}, {c, 3}};
  ASSERT_TRUE(pool->checkpoint(pairs).ok());
  EXPECT_EQ(dev_->copies, 1);
  EXPECT_EQ(dev_->regions_copied, 2 * kTensors);
  EXPECT_TRUE(pool->contains(1) && pool->contains(2));
  EXPECT_FALSE(pool->contains(3));
  EXPECT_EQ(pool->stats().checkpoints_skipped, 1);
  const StateSlot dst[] = {c, a};
  const std::pair<CheckpointId, StateSlot> in[] = {{*pool->lookup(1), dst[0]}, {*pool->lookup(2), dst[1]}};
  ASSERT_TRUE(pool->restore(in).ok());
  EXPECT_EQ(read(*pool, c), sa);
  EXPECT_EQ(read(*pool, a), sb);
}

// A Vulkan buffer's memory goes back to the driver when it is destroyed, whatever is queued:
// the pool waits for its copies before its tensors go.
TEST_P(StatePool, DestroyedWithCopiesQueued) {
  auto pool = make(2, 1);
  ASSERT_TRUE(pool);
  const StateSlot a = take(*pool), b = take(*pool);
  write(*pool, a, 91);
  const StateSlot both[] = {a, b};
  ASSERT_TRUE(pool->zero(both).ok());
  ASSERT_TRUE(pool->checkpoint(a, 5).ok());
  pool.reset();
  EXPECT_TRUE(dev_->synchronize().ok());
  EXPECT_TRUE(make(1, 0) != nullptr) << "the device still works";
}

TEST_P(StatePool, BadIdsAreErrorsThatQueueNothing) {
  auto pool = make(2, 1);
  ASSERT_TRUE(pool);
  ASSERT_TRUE(pool->reserve_swap(1).ok());
  const StateSlot s = take(*pool);
  dev_->reset();
  auto has = [](const Status& st, const std::string& what) {
    return st.code() == StatusCode::kInvalidArgument && st.message().find(what) != std::string::npos;
  };
  EXPECT_TRUE(has(pool->free(5), "slot 5 outside [0, 2)")) << pool->free(5).to_string();
  EXPECT_TRUE(has(pool->free(1), "slot 1 is already free (a double free)"));
  const StateSlot dup[] = {s, s};
  EXPECT_TRUE(has(pool->zero(dup), "named twice"));
  const StateSlot not_live[] = {s, 1};
  EXPECT_TRUE(has(pool->zero(not_live), "slot 1 is not live"));
  EXPECT_TRUE(has(pool->checkpoint(1, 9), "checkpoint: slot 1 is not live"));
  EXPECT_TRUE(has(pool->fork(-1).status(), "fork: slot -1 outside"));
  EXPECT_TRUE(has(pool->fork(s, 0).status(), "n must be >= 1"));
  const std::pair<CheckpointId, StateSlot> bad_row[] = {{CheckpointId{3, 1}, s}};
  EXPECT_TRUE(has(pool->restore(bad_row), "checkpoint row 3 outside [0, 1)"));
  const std::pair<CheckpointId, StateSlot> never[] = {{CheckpointId{0, 0}, s}};
  EXPECT_TRUE(has(pool->restore(never), "the row is free"));
  EXPECT_TRUE(has(pool->pin(CheckpointId{0, 0}), "no longer held"));
  const std::pair<StateSlot, int32_t> bad_host[] = {{s, 1}};
  EXPECT_TRUE(has(pool->swap_out(bad_host), "host slot 1 outside [0, 1)"));
  const std::pair<int32_t, StateSlot> in_not_live[] = {{0, 1}};
  EXPECT_TRUE(has(pool->swap_in(in_not_live), "swap_in: slot 1 is not live"));
  EXPECT_EQ(dev_->copies, 0) << "nothing is queued when any argument is bad";

  ASSERT_TRUE(pool->checkpoint(s, 9).ok());
  const auto id = pool->lookup(9);
  EXPECT_TRUE(has(pool->unpin(*id), "is not pinned"));
  EXPECT_TRUE(has(pool->rollback(*id, s), "not a snapshot"));
  const std::pair<CheckpointId, StateSlot> twice[] = {{*id, s}, {*id, s}};
  EXPECT_TRUE(has(pool->restore(twice), "named twice"));
  EXPECT_TRUE(pool->contains(9)) << "a refused rollback releases nothing";
}

TEST_P(StatePool, BadConfigsAreRefusedNamingTheState) {
  auto refused = [&](RecurrentStateConfig c, const std::string& what) {
    auto p = RecurrentStatePool::create(*dev_, c);
    if (p.ok()) return ::testing::AssertionFailure() << "accepted";
    if (p.status().message().find(what) == std::string::npos) return ::testing::AssertionFailure() << p.status().to_string();
    return ::testing::AssertionSuccess();
  };
  RecurrentStateConfig c = config(0, 1);
  EXPECT_TRUE(refused(c, "n_slots > 0"));
  c = config(2, 1);
  c.layers[1].states[0].dtype = DType::kI32;
  EXPECT_TRUE(refused(c, "layer 2 state 'ssm': dtype must be f32, f16 or bf16, got"));
  c = config(2, 1);
  c.layers[0].states[1].shape = {2, 2, 2, 2};
  EXPECT_TRUE(refused(c, "shape [2, 2, 2, 2] must have 1 to 3 dims"));
  c = config(2, 1);
  c.layers[0].states[0].shape = {0, 8};
  EXPECT_TRUE(refused(c, "has a dim <= 0"));
  c = config(2, 1);
  c.layers[0].states[1].name = "conv";
  EXPECT_TRUE(refused(c, "state 'conv' is listed twice"));
  c = config(2, 1);
  c.layers[1].layer = 0;
  EXPECT_TRUE(refused(c, "layer 0 is negative or listed twice"));
  c = config(2, 1);
  c.layers.clear();
  EXPECT_TRUE(refused(c, "no recurrent layers"));
}

}  // namespace
}  // namespace tessera

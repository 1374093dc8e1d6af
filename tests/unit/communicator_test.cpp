// The Communicator's rank-independent parts (core/comm/communicator.h): a one-rank group leaves
// data as it is (f16 and bf16 values through their f32 sum exactly), refuses what it cannot
// sum or send, and open_communicator picks the transport from the launch. The sums over several
// ranks are tested under mpirun (tests/model/tensor_parallel_test.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "core/comm/communicator.h"
#include "quant/half.h"

namespace tessera {
namespace {

TEST(Communicator, OneRankLeavesEveryDtypeAsItIs) {
  LocalCommunicator c;
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.size(), 1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> f(97);
  for (float& x : f) x = u(rng);
  const std::vector<float> f0 = f;
  ASSERT_TRUE(c.all_reduce_sum(f.data(), int64_t(f.size()), DType::kF32).ok());
  EXPECT_EQ(f, f0);
  std::vector<uint16_t> h, b;
  for (float x : f0) {
    h.push_back(f32_to_fp16(x));
    b.push_back(f32_to_bf16(x));
  }
  const std::vector<uint16_t> h0 = h, b0 = b;
  ASSERT_TRUE(c.all_reduce_sum(h.data(), int64_t(h.size()), DType::kF16).ok());
  ASSERT_TRUE(c.all_reduce_sum(b.data(), int64_t(b.size()), DType::kBF16).ok());
  EXPECT_EQ(h, h0);  // widened to f32 and rounded back: exact
  EXPECT_EQ(b, b0);
  std::vector<float> gathered(f.size());
  ASSERT_TRUE(c.all_gather(f.data(), gathered.data(), f.size() * 4).ok());
  EXPECT_EQ(gathered, f0);
}

TEST(Communicator, RefusesWhatItCannotDo) {
  LocalCommunicator c;
  int32_t ids[4] = {1, 2, 3, 4};
  const Status s = c.all_reduce_sum(ids, 4, DType::kI32);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cannot be summed"), std::string::npos) << s.to_string();
  EXPECT_FALSE(c.all_reduce_sum(ids, -1, DType::kF32).ok());
  EXPECT_FALSE(c.send(ids, 4, 1).ok());
  EXPECT_FALSE(c.recv(ids, 4, 1).ok());
  EXPECT_FALSE(c.broadcast(ids, 4, 1).ok());
  EXPECT_TRUE(c.broadcast(ids, 4, 0).ok());
}

TEST(Communicator, OpenPicksTheLaunchsTransport) {
  // This test runs outside mpirun: one rank, unless asked for by name.
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr);
  auto local = open_communicator();
  ASSERT_TRUE(local.ok()) << local.status().to_string();
  EXPECT_EQ((*local)->backend(), "local");
  EXPECT_EQ((*local)->size(), 1);
  setenv("TESSERA_COMM", "carrier-pigeon", 1);
  auto bad = open_communicator();
  unsetenv("TESSERA_COMM");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("carrier-pigeon"), std::string::npos) << bad.status().to_string();
}

}  // namespace
}  // namespace tessera

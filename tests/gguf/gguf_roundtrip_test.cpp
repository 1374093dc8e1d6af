// Writer -> File round trips: every metadata type (nested arrays too), every GGUF dtype we know,
// alignment, typed getters and their errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "models/gguf/gguf.h"
#include "tests/gguf/gguf_test_util.h"

namespace tessera::gguf {
namespace {

using testing::random_bytes;

Value u(ValueType t, uint64_t v) { return Value::of_uint(t, v); }
Value s(ValueType t, int64_t v) { return Value::of_int(t, v); }

std::vector<std::pair<std::string, Value>> every_type() {
  std::vector<std::pair<std::string, Value>> kv = {
      {"t.u8", u(ValueType::kU8, 250)},
      {"t.i8", s(ValueType::kI8, -120)},
      {"t.u16", u(ValueType::kU16, 65000)},
      {"t.i16", s(ValueType::kI16, -32000)},
      {"t.u32", u(ValueType::kU32, 4000000000u)},
      {"t.i32", s(ValueType::kI32, -2000000000)},
      {"t.f32", Value::of_float(ValueType::kF32, 1.5f)},
      {"t.bool", Value::of_bool(true)},
      {"t.string", Value::of_string(std::string("h\xc3\xa9llo\0world", 12))},
      {"t.empty_string", Value::of_string("")},
      {"t.u64", u(ValueType::kU64, 0xfedcba9876543210ull)},
      {"t.i64", s(ValueType::kI64, -0x123456789abcdefll)},
      {"t.f64", Value::of_float(ValueType::kF64, -2.718281828459045)},
      {"t.empty_array", Value::of_array(ValueType::kF32, {})},
  };
  std::vector<Value> strings = {Value::of_string("a"), Value::of_string(""),
                                Value::of_string("ccc")};
  kv.emplace_back("t.string_array", Value::of_array(ValueType::kString, strings));
  std::vector<Value> inner1 = {s(ValueType::kI16, 1), s(ValueType::kI16, -2)};
  std::vector<Value> inner2 = {s(ValueType::kI16, 3)};
  Value nested = Value::of_array(ValueType::kArray, {Value::of_array(ValueType::kI16, inner1),
                                                     Value::of_array(ValueType::kI16, inner2)});
  kv.emplace_back("t.nested", nested);
  // Depth 8: the limit exactly.
  Value deep = Value::of_array(ValueType::kBool, {Value::of_bool(false)});
  for (int d = 1; d < kMaxNestingDepth; ++d) deep = Value::of_array(ValueType::kArray, {deep});
  kv.emplace_back("t.deep", deep);
  return kv;
}

TEST(GgufRoundTrip, EveryMetadataType) {
  Writer w;
  auto kv = every_type();
  for (const auto& [k, v] : kv) w.add(k, v);
  auto bytes = w.serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto f = File::open_memory(bytes->data(), bytes->size(), "mem.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->version(), 3u);
  ASSERT_EQ((*f)->metadata().size(), kv.size());
  for (size_t k = 0; k < kv.size(); ++k) {
    EXPECT_EQ((*f)->metadata()[k].first, kv[k].first);
    EXPECT_TRUE((*f)->metadata()[k].second == kv[k].second) << kv[k].first;
  }
  EXPECT_EQ((*f)->find("t.string")->s.size(), 12u);  // the embedded NUL survives
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufRoundTrip, DeeperThanLimitIsRejectedByWriter) {
  Value deep = Value::of_array(ValueType::kBool, {Value::of_bool(false)});
  for (int d = 0; d < kMaxNestingDepth; ++d) deep = Value::of_array(ValueType::kArray, {deep});
  Writer w;
  w.add("t.too_deep", deep);
  auto bytes = w.serialize();
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("nested deeper than 8"), std::string::npos)
      << bytes.status().message();
}

TEST(GgufRoundTrip, MixedArrayIsRejectedByWriter) {
  Writer w;
  w.add("t.mixed", Value::of_array(ValueType::kU8, {u(ValueType::kU8, 1), Value::of_bool(true)}));
  auto bytes = w.serialize();
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("t.mixed'[1] is bool in an array of u8"),
            std::string::npos)
      << bytes.status().message();
}

TEST(GgufRoundTrip, TypedGetters) {
  Writer w;
  w.add_string("a.s", "text");
  w.add_u32("a.u32", 30);
  w.add_i32("a.i32", -7);
  w.add_f32("a.f32", 0.25f);
  w.add_bool("a.b", true);
  w.add_u64("a.big", ~0ull);
  w.add_string_array("a.sa", {"x", "yy"});
  w.add_i32_array("a.ia", {1, -2, 3});
  w.add_f32_array("a.fa", {0.5f, -1.0f});
  w.add_u32("a.u32", 31);  // replaces in place
  auto bytes = w.serialize();
  ASSERT_TRUE(bytes.ok());
  auto fr = File::open_memory(bytes->data(), bytes->size(), "g.gguf");
  ASSERT_TRUE(fr.ok()) << fr.status().to_string();
  const File& f = **fr;
  EXPECT_EQ(f.metadata().size(), 9u);
  EXPECT_EQ(*f.get_string("a.s"), "text");
  EXPECT_EQ(*f.get_int("a.u32"), 31);
  EXPECT_EQ(*f.get_int("a.i32"), -7);
  EXPECT_EQ(*f.get_float("a.f32"), 0.25);
  EXPECT_EQ(*f.get_float("a.u32"), 31.0);
  EXPECT_TRUE(*f.get_bool("a.b"));
  EXPECT_EQ(*f.get_string_array("a.sa"), (std::vector<std::string>{"x", "yy"}));
  EXPECT_EQ(*f.get_int_array("a.ia"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(*f.get_float_array("a.fa"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(*f.get_float_array("a.ia"), (std::vector<double>{1, -2, 3}));

  auto missing = f.get_int("a.nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "g.gguf: key 'a.nope' not found");
  auto mistyped = f.get_string("a.u32");
  ASSERT_FALSE(mistyped.ok());
  EXPECT_EQ(mistyped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mistyped.status().message(), "g.gguf: key 'a.u32' is u32, expected string");
  auto arr = f.get_int_array("a.sa");
  ASSERT_FALSE(arr.ok());
  EXPECT_EQ(arr.status().message(), "g.gguf: key 'a.sa' is array of string, expected array of integers");
  auto big = f.get_int("a.big");
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfRange);
  EXPECT_FALSE(f.get_bool("a.s").ok());
  EXPECT_FALSE(f.get_float("a.s").ok());
}

struct TensorCase {
  DType dtype;
  std::vector<int64_t> shape;
};

TEST(GgufRoundTrip, TensorsOfEveryDtypeAndAlignment) {
  for (uint32_t alignment : {32u, 64u, 1u, 4096u}) {
    SCOPED_TRACE("alignment " + std::to_string(alignment));
    std::mt19937_64 rng(alignment);
    const std::vector<TensorCase> cases = {
        {DType::kF32, {3, 5}},      {DType::kF16, {7}},           {DType::kBF16, {2, 3, 4}},
        {DType::kI8, {5, 3}},       {DType::kI32, {1, 2, 3, 2}},  {DType::kQ8_0, {3, 64}},
        {DType::kQ4_0, {2, 32}},    {DType::kQ4_1, {4, 96}},
    };
    Writer w;
    if (alignment != kDefaultAlignment) w.set_alignment(alignment);
    w.add_string("general.architecture", "test");
    std::vector<std::vector<uint8_t>> data;
    for (size_t k = 0; k < cases.size(); ++k) {
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < cases[k].shape.size(); ++d) rows *= cases[k].shape[d];
      const size_t nbytes = size_t(dtype_row_bytes(cases[k].dtype, cases[k].shape.back()) * rows);
      data.push_back(random_bytes(rng, nbytes));
      ASSERT_TRUE(w.add_tensor("t" + std::to_string(k), cases[k].dtype, cases[k].shape,
                               data.back().data(), nbytes).ok());
    }
    const std::string path = testing::temp_path("roundtrip.gguf");
    ASSERT_TRUE(w.write(path).ok());
    auto fr = File::open(path);
    ASSERT_TRUE(fr.ok()) << fr.status().to_string();
    const File& f = **fr;
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.file_size(), std::filesystem::file_size(path));
    ASSERT_EQ(f.tensors().size(), cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
      const TensorInfo& t = f.tensors()[k];
      EXPECT_EQ(t.name, "t" + std::to_string(k));
      EXPECT_EQ(t.dtype, cases[k].dtype);
      ASSERT_EQ(t.rank, int(cases[k].shape.size()));
      for (int d = 0; d < t.rank; ++d) EXPECT_EQ(t.shape[d], cases[k].shape[d]);
      EXPECT_EQ(t.nbytes, data[k].size());
      EXPECT_EQ(t.offset % alignment, 0u);
      EXPECT_EQ(std::memcmp(f.tensor_data(t), data[k].data(), data[k].size()), 0);
      EXPECT_EQ(f.find_tensor(t.name), &t);
    }
    EXPECT_EQ(f.find_tensor("nope"), nullptr);
    // The mapping outlives the File.
    auto keep = f.mapping();
    const auto* first = static_cast<const uint8_t*>(f.tensor_data(f.tensors()[0]));
    fr = Status(StatusCode::kCancelled, "dropped");
    EXPECT_EQ(std::memcmp(first, data[0].data(), data[0].size()), 0);
    std::remove(path.c_str());
  }
}

TEST(GgufRoundTrip, WriterRejectsBadTensors) {
  Writer w;
  std::vector<uint8_t> buf(4096, 1);
  EXPECT_TRUE(w.add_tensor("ok", DType::kF32, {2, 4}, buf.data(), 32).ok());
  auto expect_error = [&](Status st, const std::string& needle) {
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  expect_error(w.add_tensor("ok", DType::kF32, {2, 4}, buf.data(), 32), "duplicate tensor name");
  expect_error(w.add_tensor("r0", DType::kF32, {}, buf.data(), 4), "rank 0 is outside 1..4");
  expect_error(w.add_tensor("r5", DType::kF32, {1, 1, 1, 1, 1}, buf.data(), 4), "rank 5");
  expect_error(w.add_tensor("z", DType::kF32, {0, 4}, buf.data(), 0), "dimension 0 is 0");
  expect_error(w.add_tensor("q", DType::kQ8_0, {2, 48}, buf.data(), 102),
               "not a multiple of the block size 32");
  expect_error(w.add_tensor("n", DType::kF16, {2, 4}, buf.data(), 15), "got 15 bytes, shape needs 16");
  expect_error(w.add_tensor("", DType::kF16, {2, 4}, buf.data(), 16), "empty tensor name");
}

TEST(GgufRoundTrip, OpenMissingFileIsNotFound) {
  auto f = File::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("/nonexistent/dir/model.gguf: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace tessera::gguf

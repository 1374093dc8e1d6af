#include <gtest/gtest.h>

#include "core/status.h"

namespace tessera {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return InvalidArgument("x=" + std::to_string(x) + " is not positive");
  return x * 2;
}

Status use(int x, int* out) {
  TS_ASSIGN_OR_RETURN(*out, parse_positive(x));
  return OkStatus();
}

TEST(Status, CarriesCodeAndMessage) {
  const Status s = OutOfRange("offset 10 past end 8");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.to_string(), "OutOfRange: offset 10 past end 8");
  EXPECT_EQ(s.with_context("model.gguf: ").message(), "model.gguf: offset 10 past end 8");
  EXPECT_TRUE(OkStatus().ok());
}

TEST(Result, PropagatesThroughMacros) {
  int v = 0;
  EXPECT_TRUE(use(3, &v).ok());
  EXPECT_EQ(v, 6);
  const Status s = use(-1, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x=-1"), std::string::npos);
}

}  // namespace
}  // namespace tessera

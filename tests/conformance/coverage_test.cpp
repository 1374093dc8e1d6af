// Every device must implement every op of the set, with f32 activations and every required
// weight format; the runs below then execute every case it claims. A missing op fails here.
#include <set>

#include "tests/conformance/conformance_test.h"
#include "tests/support/test_support.h"

namespace tessera::conformance {

std::vector<Param> make_params(const std::vector<Case>& cases) {
  std::vector<Param> out;
  for (const DevicePtr& d : devices_under_test())
    for (const Case& c : cases) out.push_back({d, std::make_shared<Case>(c)});
  return out;
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string s = info.param.device->info().id + "_" + info.param.c->name;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s + "_" + std::to_string(info.index);
}

TEST_P(ConformanceTest, MatchesReference) {
  const Param& p = GetParam();
  Device& dev = *p.device;
  const Case& c = *p.c;
  // Optional activation dtypes (f16/bf16) and weight formats beyond the required ones run only
  // where the device claims them; f32 activations with a required weight format must run.
  if ((c.act != DType::kF32 || !is_required_weight(c.weight)) && !dev.supports(c.op, c.act, c.weight))
    TESSERA_SKIP_HARDWARE() << dev.info().id << " does not claim " << op_name(c.op) << " with " << dtype_name(c.act)
                 << " activations and " << dtype_name(c.weight) << " weights";
  const std::string err = run_case(dev, c);
  EXPECT_TRUE(err.empty()) << err;
}

// Ops whose second input is a weight of any format.
bool takes_weight(OpKind op) { return op == OpKind::kEmbed || op == OpKind::kMatmul || op == OpKind::kMatmulId; }

TEST(Coverage, EveryDeviceImplementsTheWholeOpSet) {
  const auto devices = devices_under_test();
  ASSERT_FALSE(devices.empty()) << "no device found at all (the CPU backend should always be there)";
  for (const DevicePtr& d : devices) {
    for (int i = 0; i < kNumOps; ++i) {
      const OpKind op = OpKind(i);
      if (op == OpKind::kView || op == OpKind::kAllReduce) continue;  // pseudo-ops
      if (takes_weight(op)) {
        for (DType w : required_weight_dtypes())
          EXPECT_TRUE(d->supports(op, DType::kF32, w))
              << d->info().id << " lacks " << op_name(op) << " with " << dtype_name(w) << " weights";
      } else if (op == OpKind::kAttention) {
        EXPECT_TRUE(d->supports(op, DType::kF32, DType::kF16)) << d->info().id << " lacks attention over an f16 cache";
        EXPECT_TRUE(d->supports(op, DType::kF32, DType::kF32)) << d->info().id << " lacks attention over an f32 cache";
      } else if (op == OpKind::kCast) {
        for (DType to : activation_dtypes())
          EXPECT_TRUE(d->supports(op, DType::kF32, to)) << d->info().id << " lacks cast f32 -> " << dtype_name(to);
      } else {
        EXPECT_TRUE(d->supports(op, DType::kF32, DType::kF32)) << d->info().id << " lacks " << op_name(op);
      }
    }
  }
}

// Every op appears in at least one case (so a new op cannot be added without its test).
TEST(Coverage, EveryOpHasCases) {
  std::set<OpKind> seen;
  for (auto fn : {linear_cases, pointwise_cases, attention_cases, moe_cases, recurrent_cases, lora_cases})
    for (const Case& c : fn()) seen.insert(c.op);
  for (int i = 0; i < kNumOps; ++i) {
    if (OpKind(i) == OpKind::kView || OpKind(i) == OpKind::kAllReduce) continue;  // pseudo-ops
    EXPECT_TRUE(seen.count(OpKind(i))) << "no conformance case for " << op_name(OpKind(i));
  }
}

}  // namespace tessera::conformance

// The JSON report round-trips, bad files get errors naming them, compare computes ratios.
#include "bench/report.h"

#include <gtest/gtest.h>

namespace tessera::bench {
namespace {

KernelResult kernel(const std::string& key, const std::string& op, const std::string& wdtype, Cost cost,
                    double seconds) {
  KernelResult k;
  k.key = key, k.model = "m", k.phase = "decode-b1", k.name = key, k.op = op;
  k.act_dtype = "f32", k.weight_dtype = wdtype, k.shape = "M=1 N=2 K=3";
  k.cost = cost, k.copies = 3, k.working_set_bytes = 3 * cost.bytes;
  k.status = "ok";
  k.seconds = make_stat({seconds, seconds * 1.02, seconds * 0.99});
  return k;
}

DeviceReport device(const std::string& id, double scale) {
  DeviceReport d;
  d.id = id, d.name = "test " + id, d.kind = "cpu", d.threads = 2;
  d.ceilings.push_back({"read", "GB/s", "test", make_stat({100, 101, 99})});
  d.ceilings.push_back({"f32", "GFLOP/s", "test", make_stat({1000, 1001})});
  d.ceilings.push_back({"int8", "GFLOP/s", "test", make_stat({4000})});
  d.bandwidth_gbs = 100, d.compute_gflops = {{"f32", 1000}, {"int8", 4000}};
  d.kernels.push_back(kernel("a", "matmul", "q4_0", {1e6, 2e6}, 2e-5 * scale));
  d.kernels.push_back(kernel("b", "rms_norm", "f32", {1e6, 1e6}, 1e-5 * scale));
  KernelResult skipped = kernel("c", "matmul", "f32", {1e9, 1e9}, 0);
  skipped.status = "skipped", skipped.note = "too slow", skipped.seconds = {};
  d.kernels.push_back(skipped);
  for (auto& k : d.kernels) finish_kernel(d, k);
  return d;
}

TEST(Report, FinishKernelUsesTheRightCeiling) {
  const DeviceReport d = device("cpu", 1.0);
  const KernelResult& a = d.kernels[0];  // q4_0 matmul -> int8 ceiling; 2 FLOP/B -> 200 GFLOP/s attainable
  EXPECT_EQ(a.ceiling, "int8");
  EXPECT_EQ(a.bound, "memory");
  EXPECT_NEAR(a.gbs, 1e6 / a.seconds.median / 1e9, 1e-9);
  EXPECT_DOUBLE_EQ(a.roofline_gflops, 200);
  EXPECT_NEAR(a.pct_roofline, 100 * (2e6 / a.seconds.median / 1e9) / 200, 1e-9);
  EXPECT_EQ(d.kernels[1].ceiling, "f32");  // pointwise ops are held to f32
  EXPECT_EQ(d.kernels[2].gbs, 0);          // skipped: no achieved figures
}

TEST(Report, JsonRoundTrips) {
  RunReport r;
  r.tool = "tessera-bench test", r.created = "2026-01-01T00:00:00Z", r.host = "host", r.quick = true;
  r.devices.push_back(device("cpu", 1.0));
  r.devices.push_back(device("vulkan:0", 0.5));
  const std::string text = to_json(r);
  auto back = from_json(text, "mem.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->schema_version, kSchemaVersion);
  EXPECT_EQ(back->host, "host");
  EXPECT_TRUE(back->quick);
  ASSERT_EQ(back->devices.size(), 2u);
  const DeviceReport& d = back->devices[1];
  EXPECT_EQ(d.id, "vulkan:0");
  EXPECT_EQ(d.compute_gflops.at("int8"), 4000);
  ASSERT_EQ(d.ceilings.size(), 3u);
  EXPECT_EQ(d.ceilings[0].value.median, 100);
  ASSERT_EQ(d.kernels.size(), 3u);
  EXPECT_EQ(d.kernels[0].seconds.median, r.devices[1].kernels[0].seconds.median);
  EXPECT_EQ(d.kernels[0].cost.flops, 2e6);
  EXPECT_EQ(d.kernels[0].pct_roofline, r.devices[1].kernels[0].pct_roofline);
  EXPECT_EQ(d.kernels[2].status, "skipped");
  EXPECT_EQ(d.kernels[2].note, "too slow");
  EXPECT_EQ(to_json(*back), text);  // a second trip is byte-identical
}

TEST(Report, BadJsonNamesTheFile) {
  auto bad = from_json("{not json", "broken.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("broken.json"), std::string::npos);
  auto missing = from_json(R"({"schema_version": 1})", "partial.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("partial.json"), std::string::npos);
  auto future = from_json(R"({"schema_version": 99})", "future.json");
  ASSERT_FALSE(future.ok());
  EXPECT_NE(future.status().message().find("schema_version 99"), std::string::npos);
  EXPECT_FALSE(read_report("/nonexistent/x.json").ok());
}

TEST(Report, CompareComputesRatios) {
  RunReport a, b;
  a.devices.push_back(device("cpu", 1.0));
  b.devices.push_back(device("cpu", 0.25));  // B four times faster
  b.devices[0].kernels.erase(b.devices[0].kernels.begin() + 1);  // "b" only in A
  auto c = compare_reports(a, "", b, "cpu");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  ASSERT_EQ(c->rows.size(), 1u);
  EXPECT_EQ(c->rows[0].key, "a");
  EXPECT_NEAR(c->rows[0].ratio, 4.0, 1e-12);
  EXPECT_NEAR(c->geomean_ratio, 4.0, 1e-12);
  EXPECT_EQ(c->only_in_a, 1);
  EXPECT_EQ(c->only_in_b, 0);
  EXPECT_NE(format_comparison(*c).find("4.000"), std::string::npos);

  // Two devices of one run; and an unknown device is an error naming what exists.
  RunReport both;
  both.devices = {device("cpu", 1.0), device("vulkan:0", 2.0)};
  auto d = compare_reports(both, "cpu", both, "vulkan:0");
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->rows.size(), 2u);
  EXPECT_NEAR(d->geomean_ratio, 0.5, 1e-12);
  auto e = compare_reports(both, "cuda:0", both, "cpu");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("vulkan:0"), std::string::npos);
}

TEST(Report, CsvHasOneRowPerKernel) {
  RunReport r;
  r.devices.push_back(device("cpu", 1.0));
  const std::string csv = to_csv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);  // header + 3 kernels
  EXPECT_EQ(csv.rfind("device,key,", 0), 0u);
  EXPECT_NE(csv.find("\"too slow\""), std::string::npos);
}

}  // namespace
}  // namespace tessera::bench

// The SVG writer produces well-formed SVG with axes, ceilings, one point per measured kernel.
#include "bench/svg_plot.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::bench {
namespace {

DeviceReport sample_device(const std::string& id, double speed) {
  DeviceReport d;
  d.id = id, d.name = "test <device> & co", d.kind = "cpu";
  d.bandwidth_gbs = 50;
  d.compute_gflops = {{"f32", 400}, {"int8", 1600}};
  d.ceilings.push_back({"read", "GB/s", "t", make_stat({50})});
  d.ceilings.push_back({"copy", "GB/s", "t", make_stat({30})});
  const Cost costs[] = {{1e6, 5e5}, {1e6, 2e7}, {2e6, 1e3}, {1e6, 0}};
  const char* ops[] = {"matmul", "matmul", "rms_norm", "embed"};
  for (int i = 0; i < 4; ++i) {
    KernelResult k;
    k.key = "m/decode-b1/k" + std::to_string(i) + "/q4_0";
    k.op = ops[i], k.weight_dtype = "q4_0", k.cost = costs[i], k.status = "ok";
    k.seconds = make_stat({1e-4 / speed});
    finish_kernel(d, k);
    d.kernels.push_back(k);
  }
  return d;
}

// Checks that every tag closes in order (a small XML well-formedness check: no attribute may
// contain '<' or '>', which the writer guarantees by escaping).
bool well_formed(const std::string& s, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = s.find('<', i)) != std::string::npos) {
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return *why = "unterminated tag at " + std::to_string(i), false;
    const std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return *why = "empty tag", false;
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) return *why = "unexpected </" + name + ">", false;
      stack.pop_back();
      continue;
    }
    if (tag.back() == '/') continue;
    stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
  }
  if (!stack.empty()) return *why = "unclosed <" + stack.back() + ">", false;
  return true;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

TEST(SvgPlot, SingleDeviceIsWellFormedWithExpectedElements) {
  const DeviceReport d = sample_device("cpu", 1.0);
  const std::string svg = roofline_svg({&d}, "Roofline <cpu>");
  std::string why;
  EXPECT_TRUE(well_formed(svg, &why)) << why;
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns='http://www.w3.org/2000/svg'"), std::string::npos);
  EXPECT_NE(svg.find("Roofline &lt;cpu&gt;"), std::string::npos);
  EXPECT_NE(svg.find("arithmetic intensity (FLOP/byte)"), std::string::npos);
  EXPECT_NE(svg.find("read 50.0 GB/s"), std::string::npos);
  EXPECT_NE(svg.find("copy 30.0 GB/s"), std::string::npos);
  EXPECT_NE(svg.find("int8 1600 GFLOP/s"), std::string::npos);
  // Three kernels have arithmetic (embed has none): three <title>d points, listed by number.
  EXPECT_EQ(count(svg, "<title>"), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NE(svg.find("m/decode-b1/k" + std::to_string(i) + "/q4_0"), std::string::npos);
  EXPECT_NE(svg.find("1 kernel results not plotted"), std::string::npos);
  // Labelled decades on both axes.
  EXPECT_NE(svg.find(">0.001<"), std::string::npos);
  EXPECT_NE(svg.find(">1G<"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
}

TEST(SvgPlot, OverlayDrawsEveryDevice) {
  const DeviceReport a = sample_device("cpu", 1.0), b = sample_device("vulkan:0", 10.0);
  const std::string svg = roofline_svg({&a, &b}, "all");
  std::string why;
  EXPECT_TRUE(well_formed(svg, &why)) << why;
  EXPECT_EQ(count(svg, "<title>"), 6u);
  EXPECT_NE(svg.find("vulkan:0 read 50.0 GB/s"), std::string::npos);
  EXPECT_NE(svg.find("cpu read 50.0 GB/s"), std::string::npos);
}

TEST(SvgPlot, EscapesText) {
  EXPECT_EQ(xml_escape("a<b & 'c' \"d\">"), "a&lt;b &amp; &apos;c&apos; &quot;d&quot;&gt;");
}

}  // namespace
}  // namespace tessera::bench

// Roofline plots as standalone SVG text (no dependency): log-log axes with labelled decades,
// the bandwidth and compute ceilings, and one numbered point per measured kernel, keyed by a
// legend under the plot. Filled points are memory-bound, hollow ones compute-bound.
#pragma once
#include <string>
#include <vector>

#include "bench/report.h"

namespace tessera::bench {

// One device's roofline, or an overlay of several (each device in its own colour; kernels are
// numbered once, by key, so the same number is the same kernel on every device).
std::string roofline_svg(const std::vector<const DeviceReport*>& devices, const std::string& title);

// Escapes &, <, >, " and ' for SVG text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace tessera::bench

#include "bench/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace tessera::bench {

namespace {

// Page geometry (pixels): the plot area, the side legend, the kernel list under the plot.
constexpr double kWidth = 1200, kLeft = 90, kRight = 840, kTop = 60, kBottom = 620;
constexpr double kListTop = 690, kListLine = 15, kListColumn = 560;

const char* const kDeviceColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};

const char* op_colour(const std::string& op) {
  static const std::map<std::string, const char*> colours = {
      {"matmul", "#1f77b4"}, {"matmul_id", "#9467bd"}, {"attention", "#ff7f0e"}, {"rms_norm", "#2ca02c"},
      {"rope", "#17becf"},   {"glu", "#8c564b"},       {"add", "#e377c2"},       {"embed", "#7f7f7f"}};
  auto it = colours.find(op);
  return it == colours.end() ? "#bcbd22" : it->second;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string printf_str(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// "0.01", "1", "1000" for x decades.
std::string decade_label(int k) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", k >= 0 ? 0 : -k, std::pow(10.0, k));
  return buf;
}

// "100M", "1G", "10T" for y decades given in GFLOP/s (10^k GFLOP/s).
std::string flops_label(int k) {
  static const char* const prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  const int e = k + 9;  // FLOP/s exponent
  if (e < 0) return "1e" + std::to_string(e);
  const int p = std::min(e / 3, 6);
  return printf_str("%.0f", std::pow(10.0, e - 3 * p)) + prefixes[p];
}

struct Axes {
  double x_lo, x_hi, y_lo, y_hi;  // decades (log10), y in GFLOP/s
  double px(double ai) const { return kLeft + (std::log10(ai) - x_lo) / (x_hi - x_lo) * (kRight - kLeft); }
  double py(double g) const { return kBottom - (std::log10(g) - y_lo) / (y_hi - y_lo) * (kBottom - kTop); }
};

bool plotted(const KernelResult& k) { return k.status == "ok" && k.cost.flops > 0 && k.gflops > 0; }

Axes choose_axes(const std::vector<const DeviceReport*>& devices) {
  double ai_min = 0.1, ai_max = 10, g_min = 1, g_max = 10;
  for (const auto* d : devices) {
    for (const auto& [name, peak] : d->compute_gflops) {
      g_max = std::max(g_max, peak);
      if (d->bandwidth_gbs > 0) ai_max = std::max(ai_max, 4 * peak / d->bandwidth_gbs);
    }
    for (const auto& k : d->kernels) {
      if (!plotted(k)) continue;
      ai_min = std::min(ai_min, k.cost.intensity());
      ai_max = std::max(ai_max, k.cost.intensity());
      g_min = std::min(g_min, k.gflops);
      g_max = std::max(g_max, k.gflops);
    }
  }
  Axes a;
  a.x_lo = std::max(-4.0, std::floor(std::log10(ai_min)));
  a.x_hi = std::min(6.0, std::ceil(std::log10(ai_max)));
  for (const auto* d : devices)
    if (d->bandwidth_gbs > 0) g_min = std::min(g_min, d->bandwidth_gbs * std::pow(10.0, a.x_lo));
  a.y_lo = std::max(-6.0, std::floor(std::log10(g_min)));
  a.y_hi = std::min(9.0, std::ceil(std::log10(g_max * 1.5)));
  if (a.x_hi <= a.x_lo) a.x_hi = a.x_lo + 1;
  if (a.y_hi <= a.y_lo) a.y_hi = a.y_lo + 1;
  return a;
}

void draw_grid(std::string& s, const Axes& a) {
  for (int k = int(a.x_lo); k <= int(a.x_hi); ++k) {
    const double x = a.px(std::pow(10.0, k));
    s += "<line x1='" + num(x) + "' y1='" + num(kTop) + "' x2='" + num(x) + "' y2='" + num(kBottom) +
         "' class='major'/>\n<text x='" + num(x) + "' y='" + num(kBottom + 18) + "' text-anchor='middle'>" +
         decade_label(k) + "</text>\n";
    for (int m = 2; m <= 9 && k < int(a.x_hi); ++m) {
      const double xm = a.px(m * std::pow(10.0, k));
      s += "<line x1='" + num(xm) + "' y1='" + num(kTop) + "' x2='" + num(xm) + "' y2='" + num(kBottom) +
           "' class='minor'/>\n";
    }
  }
  for (int k = int(a.y_lo); k <= int(a.y_hi); ++k) {
    const double y = a.py(std::pow(10.0, k));
    s += "<line x1='" + num(kLeft) + "' y1='" + num(y) + "' x2='" + num(kRight) + "' y2='" + num(y) +
         "' class='major'/>\n<text x='" + num(kLeft - 8) + "' y='" + num(y + 4) + "' text-anchor='end'>" +
         flops_label(k) + "</text>\n";
    for (int m = 2; m <= 9 && k < int(a.y_hi); ++m) {
      const double ym = a.py(m * std::pow(10.0, k));
      s += "<line x1='" + num(kLeft) + "' y1='" + num(ym) + "' x2='" + num(kRight) + "' y2='" + num(ym) +
           "' class='minor'/>\n";
    }
  }
  s += "<rect x='" + num(kLeft) + "' y='" + num(kTop) + "' width='" + num(kRight - kLeft) + "' height='" +
       num(kBottom - kTop) + "' fill='none' stroke='#333'/>\n";
  s += "<text x='" + num((kLeft + kRight) / 2) + "' y='" + num(kBottom + 42) +
       "' text-anchor='middle' class='axis'>arithmetic intensity (FLOP/byte)</text>\n";
  s += "<text x='22' y='" + num((kTop + kBottom) / 2) + "' text-anchor='middle' class='axis' transform='rotate(-90 22 " +
       num((kTop + kBottom) / 2) + ")'>performance (FLOP/s)</text>\n";
}

// A sloped bandwidth line y = ai * gbs (GFLOP/s at ai FLOP/byte is ai * GB/s), up to |ai_end|.
void draw_bandwidth(std::string& s, const Axes& a, double gbs, double ai_end, const std::string& colour,
                    const std::string& label, bool dashed, double label_at) {
  const double x0 = std::pow(10.0, a.x_lo);
  const double x1 = std::min(ai_end, std::pow(10.0, a.x_hi));
  s += "<line x1='" + num(a.px(x0)) + "' y1='" + num(a.py(gbs * x0)) + "' x2='" + num(a.px(x1)) + "' y2='" +
       num(a.py(gbs * x1)) + "' stroke='" + colour + "' stroke-width='2'" +
       (dashed ? " stroke-dasharray='6 4'" : "") + " clip-path='url(#plot)'/>\n";
  const double lx = std::pow(10.0, a.x_lo + label_at * (a.x_hi - a.x_lo));
  const double angle = std::atan2(a.py(gbs * lx * 10) - a.py(gbs * lx), a.px(lx * 10) - a.px(lx)) * 180 / M_PI;
  const double x = a.px(lx), y = a.py(gbs * lx) - 6;
  if (y > kTop && y < kBottom)
    s += "<text x='" + num(x) + "' y='" + num(y) + "' fill='" + colour + "' transform='rotate(" + num(angle) + " " +
         num(x) + " " + num(y) + ")'>" + xml_escape(label) + "</text>\n";
}

void draw_ceilings(std::string& s, const Axes& a, const DeviceReport& d, const std::string& colour,
                   const std::string& prefix, int index) {
  double peak_max = 0;
  for (const auto& [name, g] : d.compute_gflops) peak_max = std::max(peak_max, g);
  const double bw_end = d.bandwidth_gbs > 0 && peak_max > 0 ? peak_max / d.bandwidth_gbs : std::pow(10.0, a.x_hi);
  if (d.bandwidth_gbs > 0)
    draw_bandwidth(s, a, d.bandwidth_gbs, bw_end, colour, prefix + "read " + num(d.bandwidth_gbs) + " GB/s", false,
                   0.08 + 0.12 * index);
  for (const auto& c : d.ceilings)
    if (c.name == "copy" && c.value.median > 0)
      draw_bandwidth(s, a, c.value.median, bw_end, colour, prefix + "copy " + num(c.value.median) + " GB/s", true,
                     0.30 + 0.12 * index);
  int row = 0;
  for (const auto& [name, g] : d.compute_gflops) {
    const double ridge = d.bandwidth_gbs > 0 ? g / d.bandwidth_gbs : std::pow(10.0, a.x_lo);
    const double y = a.py(g);
    s += "<line x1='" + num(std::max(kLeft, a.px(ridge))) + "' y1='" + num(y) + "' x2='" + num(kRight) + "' y2='" +
         num(y) + "' stroke='" + colour + "' stroke-width='2' clip-path='url(#plot)'/>\n";
    // Staggered along the line so ceilings close in value keep readable labels.
    s += "<text x='" + num(kRight - 4 - 160.0 * (index + row)) + "' y='" + num(y - 4) + "' text-anchor='end' fill='" +
         colour + "'>" + xml_escape(prefix + name + " " + printf_str(g >= 100 ? "%.0f" : g >= 1 ? "%.1f" : "%.2g", g) + " GFLOP/s") + "</text>\n";
    ++row;
  }
}

// Places a kernel's number next to its point where it overlaps no earlier label.
struct LabelPlacer {
  struct Box { double x0, y0, x1, y1; };
  std::vector<Box> boxes;
  void place(std::string& s, double cx, double cy, const std::string& text) {
    const double w = 6.0 * double(text.size()), h = 10;
    const double offsets[][2] = {{6, -4}, {6, 10}, {-6 - w, -4}, {-6 - w, 10}, {-w / 2, -8}, {-w / 2, 18}};
    double bx = cx + offsets[0][0], by = cy + offsets[0][1];
    for (const auto& o : offsets) {
      const Box b{cx + o[0], cy + o[1] - h, cx + o[0] + w, cy + o[1]};
      const bool clear = std::none_of(boxes.begin(), boxes.end(), [&](const Box& e) {
        return b.x0 < e.x1 && e.x0 < b.x1 && b.y0 < e.y1 && e.y0 < b.y1;
      });
      if (clear) {
        bx = b.x0;
        by = b.y1;
        break;
      }
    }
    boxes.push_back({bx, by - h, bx + w, by});
    s += "<text x='" + num(bx) + "' y='" + num(by) + "' class='label'>" + text + "</text>\n";
  }
};

}  // namespace

std::string xml_escape(const std::string& in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {
// The side legend: what the colours and fills mean.
void draw_legend(std::string& s, const std::vector<const DeviceReport*>& devices, bool overlay) {
  double ly = kTop + 10;
  auto legend_line = [&](const std::string& colour, bool filled, const std::string& text) {
    s += "<circle cx='870' cy='" + num(ly - 4) + "' r='5' stroke='" + colour + "' stroke-width='1.5' fill='" +
         (filled ? colour : std::string("white")) + "'/><text x='882' y='" + num(ly) + "'>" + xml_escape(text) +
         "</text>\n";
    ly += 18;
  };
  legend_line("#444", true, "filled: memory-bound (left of the ridge)");
  legend_line("#444", false, "hollow: compute-bound");
  ly += 8;
  if (overlay) {
    for (size_t i = 0; i < devices.size(); ++i)
      legend_line(kDeviceColours[i % 6], true, devices[i]->id + ": " + devices[i]->name.substr(0, 40));
  } else {
    for (const char* op : {"matmul", "matmul_id", "attention", "rms_norm", "rope", "glu", "add"})
      legend_line(op_colour(op), true, op);
  }
  ly += 8;
  s += "<text x='862' y='" + num(ly) + "'>Sloped lines: bandwidth ceilings (solid: read,</text>\n";
  s += "<text x='862' y='" + num(ly + 15) + "'>dashed: copy). Flat lines: compute ceilings.</text>\n";
  s += "<text x='862' y='" + num(ly + 30) + "'>Numbers: kernels, listed below.</text>\n";
}

// The numbered kernel list under the plot (the first device's figures).
void draw_kernel_list(std::string& s, const std::vector<const DeviceReport*>& devices,
                      const std::vector<std::string>& keys, int list_rows, int not_plotted, bool overlay) {
  const auto* first = devices.front();
  std::map<std::string, const KernelResult*> by_key;
  for (const auto& k : first->kernels) by_key[k.key] = &k;
  s +=
      "<text x='" + num(kLeft) + "' y='" + num(kListTop - 12) + "' class='list' font-weight='bold'>" +
      xml_escape(overlay ? "kernel (achieved on " + first->id + ")" : "kernel: achieved GB/s, GFLOP/s, % of roofline") +
      "</text>\n";
  for (size_t i = 0; i < keys.size(); ++i) {
    const double x = 20 + kListColumn * double(i % 2), y = kListTop + kListLine * double(i / 2 + 1);
    std::string line = printf_str("%3.0f ", double(i + 1)) + keys[i];
    auto it = by_key.find(keys[i]);
    if (it != by_key.end() && plotted(*it->second))
      line += printf_str("  %.3g GB/s", it->second->gbs) + printf_str(" %.3g GFLOP/s", it->second->gflops) +
              printf_str(" %.0f%%", it->second->pct_roofline);
    s += "<text x='" + num(x) + "' y='" + num(y) + "' class='list'>" + xml_escape(line) + "</text>\n";
  }
  s += "<text x='20' y='" + num(kListTop + kListLine * (list_rows + 1)) + "' class='list'>" +
       std::to_string(not_plotted) +
       " kernel results not plotted (skipped, failed, or without arithmetic such as embed); see the JSON/CSV.</text>\n";
}

}  // namespace

std::string roofline_svg(const std::vector<const DeviceReport*>& devices, const std::string& title) {
  const bool overlay = devices.size() > 1;
  // Number each kernel key once, in first-seen order.
  std::vector<std::string> keys;
  std::map<std::string, int> number;
  int not_plotted = 0;
  for (const auto* d : devices)
    for (const auto& k : d->kernels) {
      if (!plotted(k)) {
        ++not_plotted;
        continue;
      }
      if (number.emplace(k.key, int(keys.size()) + 1).second) keys.push_back(k.key);
    }
  const int list_rows = int(keys.size() + 1) / 2 + 1;
  const double height = kListTop + kListLine * (list_rows + 1) + 20;
  const Axes a = choose_axes(devices);

  std::string s = "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' width='" +
                  num(kWidth) + "' height='" + num(height) + "' viewBox='0 0 " + num(kWidth) + " " + num(height) +
                  "' font-family='DejaVu Sans, Arial, sans-serif' font-size='12'>\n";
  s += "<style>.major{stroke:#bbb;stroke-width:1}.minor{stroke:#eee;stroke-width:1}.axis{font-size:14px}"
       ".label{font-size:9px;fill:#222}.list{font-family:DejaVu Sans Mono,monospace;font-size:11px}</style>\n";
  s += "<defs><clipPath id='plot'><rect x='" + num(kLeft) + "' y='" + num(kTop) + "' width='" + num(kRight - kLeft) +
       "' height='" + num(kBottom - kTop) + "'/></clipPath></defs>\n";
  s += "<rect width='100%' height='100%' fill='white'/>\n";
  s += "<text x='" + num(kLeft) + "' y='30' font-size='18'>" + xml_escape(title) + "</text>\n";
  draw_grid(s, a);
  for (size_t i = 0; i < devices.size(); ++i)
    draw_ceilings(s, a, *devices[i], overlay ? kDeviceColours[i % 6] : "#444", overlay ? devices[i]->id + " " : "",
                  int(i));

  LabelPlacer labels;
  for (size_t i = 0; i < devices.size(); ++i)
    for (const auto& k : devices[i]->kernels) {
      if (!plotted(k)) continue;
      const std::string colour = overlay ? kDeviceColours[i % 6] : op_colour(k.op);
      const double cx = a.px(k.cost.intensity()), cy = a.py(k.gflops);
      const bool memory = k.bound == "memory";
      s += "<circle cx='" + num(cx) + "' cy='" + num(cy) + "' r='4' stroke='" + colour + "' stroke-width='1.5' fill='" +
           (memory ? colour : std::string("white")) + "'><title>" + xml_escape(devices[i]->id + " " + k.key) +
           "</title></circle>\n";
      labels.place(s, cx, cy, std::to_string(number[k.key]));
    }

  draw_legend(s, devices, overlay);

  draw_kernel_list(s, devices, keys, list_rows, not_plotted, overlay);
  s += "</svg>\n";
  return s;
}

}  // namespace tessera::bench

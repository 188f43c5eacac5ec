// Small SVG charts (training curves, accuracy-vs-latency fronts), written atomically.
#pragma once

#include <string>
#include <vector>

namespace synoros::io {

struct Series {
  std::string name;
  std::vector<double> x, y;
  bool points = false;  // markers only (a scatter) instead of a line
};

struct Panel {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
};

// Panels side by side, each with axes, ticks and a legend.
std::string svg_chart(const std::vector<Panel>& panels);
void write_svg_chart(const std::string& path, const std::vector<Panel>& panels);

}  // namespace synoros::io

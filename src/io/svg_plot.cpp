// SVG line and scatter charts with plain axes: enough to read a training curve or a front.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "io/atomic_file.hpp"
#include "synoros/core.hpp"
#include "synoros/plot.hpp"

namespace synoros::io {

namespace {
constexpr double kW = 460, kH = 320, kLeft = 62, kRight = 16, kTop = 34, kBottom = 46;
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

void panel(std::ostringstream& s, const Panel& p, double ox) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& se : p.series)
    for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (!std::isfinite(se.x[i]) || !std::isfinite(se.y[i])) continue;
      x0 = std::min(x0, se.x[i]), x1 = std::max(x1, se.x[i]);
      y0 = std::min(y0, se.y[i]), y1 = std::max(y1, se.y[i]);
    }
  if (!(x0 <= x1)) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x0 -= 0.5, x1 += 0.5;  // one point sits in the middle
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto X = [&](double v) { return ox + kLeft + (v - x0) / (x1 - x0) * pw; };
  auto Y = [&](double v) { return kTop + (1 - (v - y0) / (y1 - y0)) * ph; };
  s << "<text x='" << ox + kW / 2 << "' y='20' text-anchor='middle' font-size='14'>" << esc(p.title) << "</text>\n";
  s << "<rect x='" << ox + kLeft << "' y='" << kTop << "' width='" << pw << "' height='" << ph
    << "' fill='none' stroke='#444'/>\n";
  for (int t = 0; t <= 4; ++t) {
    double xv = x0 + (x1 - x0) * t / 4, yv = y0 + (y1 - y0) * t / 4;
    s << "<text x='" << X(xv) << "' y='" << kTop + ph + 16 << "' text-anchor='middle' font-size='10'>" << num(xv)
      << "</text>\n";
    s << "<text x='" << ox + kLeft - 4 << "' y='" << Y(yv) + 3 << "' text-anchor='end' font-size='10'>" << num(yv)
      << "</text>\n";
    s << "<line x1='" << ox + kLeft << "' x2='" << ox + kLeft + pw << "' y1='" << Y(yv) << "' y2='" << Y(yv)
      << "' stroke='#ddd'/>\n";
  }
  s << "<text x='" << ox + kLeft + pw / 2 << "' y='" << kH - 8 << "' text-anchor='middle' font-size='11'>"
    << esc(p.xlabel) << "</text>\n";
  s << "<text transform='translate(" << ox + 14 << "," << kTop + ph / 2
    << ") rotate(-90)' text-anchor='middle' font-size='11'>" << esc(p.ylabel) << "</text>\n";
  for (size_t k = 0; k < p.series.size(); ++k) {
    const Series& se = p.series[k];
    const char* col = kColors[k % 6];
    size_t finite = 0;
    for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) finite += std::isfinite(se.x[i]) && std::isfinite(se.y[i]);
    if (se.points || finite == 1) {  // a line through one point would draw nothing: a marker
      for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i)
        if (std::isfinite(se.x[i]) && std::isfinite(se.y[i]))
          s << "<circle cx='" << X(se.x[i]) << "' cy='" << Y(se.y[i]) << "' r='3' fill='" << col << "'/>\n";
    } else {
      s << "<polyline fill='none' stroke='" << col << "' stroke-width='1.5' points='";
      for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i)
        if (std::isfinite(se.x[i]) && std::isfinite(se.y[i])) s << X(se.x[i]) << "," << Y(se.y[i]) << " ";
      s << "'/>\n";
    }
    s << "<text x='" << ox + kLeft + 8 << "' y='" << kTop + 14 + 14 * double(k) << "' font-size='11' fill='" << col
      << "'>" << esc(se.name) << "</text>\n";
  }
}
}  // namespace

std::string svg_chart(const std::vector<Panel>& panels) {
  std::ostringstream s;
  double w = kW * double(std::max<size_t>(1, panels.size()));
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << kH << "' font-family='sans-serif'>\n";
  s << "<rect width='100%' height='100%' fill='white'/>\n";
  for (size_t i = 0; i < panels.size(); ++i) panel(s, panels[i], kW * double(i));
  s << "</svg>\n";
  return s.str();
}

void write_svg_chart(const std::string& path, const std::vector<Panel>& panels) {
  std::string text = svg_chart(panels);
  write_file_atomic(path, "chart", [&](const ByteSink& sink) { sink(text.data(), text.size()); });
}

}  // namespace synoros::io

// Selection certificates: what each launch of a plan chose and why (candidates, float64 checks,
// timings), set beside a roofline model of this machine and the model's calibration.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "synoros/profile.hpp"

namespace synoros {

double roofline_ns(double flops, double bytes, const MachinePeak& peak, int threads) {
  if (peak.gflops <= 0 || peak.gbps <= 0) return 0;
  double t = std::max(1, threads);
  // GFLOP/s is FLOPs per ns, GB/s bytes per ns.
  return std::max(flops / (peak.gflops * t), bytes / (peak.gbps * t));
}

Calibration calibrate(std::vector<double> r) {
  Calibration c;
  r.erase(
      std::remove_if(r.begin(), r.end(), [](double x) { return !(x > 0) || !std::isfinite(x); }),
      r.end());
  if (r.empty()) return c;
  std::sort(r.begin(), r.end());
  c.count = r.size();
  c.median = r.size() % 2 ? r[r.size() / 2] : (r[r.size() / 2 - 1] + r[r.size() / 2]) / 2;
  c.lowest = r.front();
  c.highest = r.back();
  return c;
}

Certificates certify(const Plan& plan, const Profile& prof, int threads) {
  if (prof.entries.size() != plan.launches().size())
    throw Error("certify: a profile of " + std::to_string(prof.entries.size()) +
                " launches for a plan of " + std::to_string(plan.launches().size()));
  Certificates c;
  c.peak = prof.peak;
  c.threads = threads;
  std::vector<double> launch_ratios, candidate_ratios;
  for (size_t k = 0; k < prof.entries.size(); ++k) {
    const ProfileEntry& e = prof.entries[k];
    LaunchCertificate l{e.node, e.label, e.ns, roofline_ns(e.flops, e.bytes, prof.peak, threads),
                        plan.launch_info()[k].selections};
    // Below a microsecond the clock's own cost and the launch overhead dominate.
    if (l.measured_ns >= 1000 && l.predicted_ns > 0)
      launch_ratios.push_back(l.predicted_ns / l.measured_ns);
    for (const SelectionCertificate& s : l.selections) {
      double predicted = roofline_ns(s.flops, s.bytes, prof.peak, threads);
      for (const CandidateRecord& r : s.candidates)
        if (r.ns >= 1000 && predicted > 0) candidate_ratios.push_back(predicted / r.ns);
    }
    c.launches.push_back(std::move(l));
  }
  c.launch_calibration = calibrate(launch_ratios);
  c.candidate_calibration = calibrate(candidate_ratios);
  return c;
}

namespace {
std::string calibration_line(const char* what, const Calibration& c) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << what << ": ";
  if (c.count == 0) return o.str() + "none measured\n";
  o << c.count << " runs, predicted/measured median " << c.median << ", lowest " << c.lowest
    << ", highest " << c.highest << "\n";
  return o.str();
}
}  // namespace

std::string Certificates::table() const {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1);
  o << "selection certificates: roofline model " << peak.gflops << " GFLOP/s and " << peak.gbps
    << " GB/s per core x " << threads << " thread" << (threads == 1 ? "" : "s") << " (" << peak.isa
    << ")\n";
  o << calibration_line("  launches", launch_calibration);
  o << calibration_line("  candidates at selection", candidate_calibration);
  for (const LaunchCertificate& l : launches) {
    if (l.selections.empty()) continue;
    o << "%" << l.node << " " << l.label << ": " << std::setprecision(1) << l.measured_ns
      << " ns, roofline " << l.predicted_ns << " ns\n";
    for (const SelectionCertificate& s : l.selections) {
      o << "  " << s.key << "  [" << s.source << "]\n";
      bool read =
          s.source == "tuning cache" || s.source == "replayed";  // nothing tried: the choice only
      for (size_t i = 0; i < s.candidates.size(); ++i) {
        const CandidateRecord& r = s.candidates[i];
        if (read && int(i) != s.chosen) continue;
        o << "    " << (int(i) == s.chosen ? "* " : "  ") << std::left << std::setw(24)
          << (r.name + " " + r.version) << std::right;
        if (!r.checked)
          o << "  " << (read ? s.source + "'s choice" : "not checked");
        else if (r.error >= 0)
          o << "  error " << std::setprecision(3) << r.error << " of bound";
        else
          o << "  " << (r.passed ? "passed" : "failed");
        if (r.ns > 0) {
          o << std::setprecision(1) << "  " << r.ns << " ns";
          double p = roofline_ns(s.flops, s.bytes, peak, threads);
          if (p > 0) o << std::setprecision(2) << " (roofline " << p / r.ns << ")";
        }
        if (!r.why.empty()) o << "  " << r.why;
        o << "\n";
      }
    }
  }
  return o.str();
}

std::string Certificates::json() const {
  auto calibration = [](const Calibration& c) {
    return nlohmann::json{
        {"count", c.count}, {"median", c.median}, {"lowest", c.lowest}, {"highest", c.highest}};
  };
  nlohmann::json j;
  j["model"] = {{"gflops_per_core", peak.gflops},
                {"gbps_per_core", peak.gbps},
                {"isa", peak.isa},
                {"threads", threads}};
  j["calibration"] = {{"launches", calibration(launch_calibration)},
                      {"candidates", calibration(candidate_calibration)}};
  nlohmann::json ls = nlohmann::json::array();
  for (const LaunchCertificate& l : launches) {
    nlohmann::json sels = nlohmann::json::array();
    for (const SelectionCertificate& s : l.selections) {
      nlohmann::json cands = nlohmann::json::array();
      for (const CandidateRecord& r : s.candidates)
        cands.push_back({{"name", r.name},
                         {"version", r.version},
                         {"checked", r.checked},
                         {"passed", r.passed},
                         {"error_of_bound", r.error},
                         {"why", r.why},
                         {"ns", r.ns}});
      sels.push_back({{"key", s.key},
                      {"source", s.source},
                      {"chosen", s.chosen},
                      {"flops", s.flops},
                      {"bytes", s.bytes},
                      {"predicted_ns", roofline_ns(s.flops, s.bytes, peak, threads)},
                      {"candidates", cands}});
    }
    ls.push_back({{"node", l.node},
                  {"label", l.label},
                  {"measured_ns", l.measured_ns},
                  {"predicted_ns", l.predicted_ns},
                  {"selections", sels}});
  }
  j["launches"] = ls;
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace synoros

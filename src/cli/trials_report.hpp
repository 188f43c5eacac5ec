// What `synoros trials` writes for people and tools: the report and PyTorch modules of operators.
#pragma once

#include <string>
#include <vector>

#include "synoros/trials.hpp"

namespace synoros::cli {

// PyTorch modules of `op` for each layer class in `mask` at batch `batch`:
// DIR/STEM_b<batch>_class<c>.py (class name SynthOp), what bench/torch_synth_network.py puts into
// the PyTorch ResNet. Returns the files written.
std::vector<std::string> export_layer_modules(const synth::Spec& spec, const synth::Operator& op,
                                              unsigned mask, int64_t batch, const std::string& dir,
                                              const std::string& stem);

// Markdown, JSON and SVG plots in cfg.dir (report.md, report.json, front.svg, reward.svg,
// op<i>.py per operator on the front).
void write_report(const trials::TrialsConfig& cfg, const trials::TrialsOutcome& out);

}  // namespace synoros::cli

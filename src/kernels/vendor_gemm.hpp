// GEMM providers backed by vendor libraries from Debian (OpenBLAS, oneDNN, libxsmm).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/providers.hpp"

namespace synoros::kernels {

std::vector<std::shared_ptr<GemmProvider>> vendor_gemm_providers();

// The linked oneDNN's version ("2.6.3"): part of every oneDNN choice in the tuning cache.
std::string onednn_version();

}  // namespace synoros::kernels

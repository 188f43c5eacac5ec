// GEMM providers backed by vendor libraries from Debian (OpenBLAS, oneDNN, libxsmm).
#pragma once

#include <memory>
#include <vector>

#include "kernels/providers.hpp"

namespace synoros::kernels {

std::vector<std::shared_ptr<GemmProvider>> vendor_gemm_providers();

}  // namespace synoros::kernels

// NVRTC, loaded at run time (libnvrtc from the CUDA toolkit; no link-time dependency): compiles
// rendered CUDA C to PTX and to a cubin for one architecture. It needs no GPU.
#pragma once

#include <string>

namespace synoros::kernels::jit {

// True when libnvrtc could be loaded (CUDA_HOME, CUDA_PATH, /usr/local/cuda or the loader path).
bool nvrtc_available(std::string* why = nullptr);

struct CudaBinary {
  bool ok = false;
  std::string ptx, cubin;
  std::string log;  // NVRTC's log (the errors when !ok)
};

// Compiles `source` for `arch` (e.g. "sm_90"): PTX, and a cubin for that architecture.
CudaBinary nvrtc_compile(const std::string& source, const std::string& arch);

}  // namespace synoros::kernels::jit

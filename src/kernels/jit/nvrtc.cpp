#include "kernels/jit/nvrtc.hpp"

#include "synoros/config.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace synoros::kernels::jit {

namespace {

// The part of nvrtc.h used here (NVRTC's C API is stable across releases).
using Program = void*;
struct Api {
  void* handle = nullptr;
  std::string why;
  const char* (*error_string)(int) = nullptr;
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*ptx_size)(Program, size_t*) = nullptr;
  int (*ptx)(Program, char*) = nullptr;
  int (*cubin_size)(Program, size_t*) = nullptr;
  int (*cubin)(Program, char*) = nullptr;
};

template <class F>
void bind(Api& a, F& f, const char* name) {
  f = reinterpret_cast<F>(::dlsym(a.handle, name));
  if (!f && a.why.empty()) a.why = std::string("libnvrtc has no ") + name;
}

const Api& api() {
  static Api a;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> names;
    for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
      if (std::string d = config::system_variable(env); !d.empty()) names.push_back(d + "/lib64/libnvrtc.so");
    names.push_back("/usr/local/cuda/lib64/libnvrtc.so");
    names.push_back("libnvrtc.so");
    for (const std::string& n : names)
      if ((a.handle = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!a.handle) {
      a.why = "libnvrtc not found (set CUDA_HOME to the CUDA toolkit)";
      return;
    }
    bind(a, a.error_string, "nvrtcGetErrorString");
    bind(a, a.create, "nvrtcCreateProgram");
    bind(a, a.destroy, "nvrtcDestroyProgram");
    bind(a, a.compile, "nvrtcCompileProgram");
    bind(a, a.log_size, "nvrtcGetProgramLogSize");
    bind(a, a.log, "nvrtcGetProgramLog");
    bind(a, a.ptx_size, "nvrtcGetPTXSize");
    bind(a, a.ptx, "nvrtcGetPTX");
    bind(a, a.cubin_size, "nvrtcGetCUBINSize");
    bind(a, a.cubin, "nvrtcGetCUBIN");
    if (!a.why.empty()) a.handle = nullptr;
  });
  return a;
}

}  // namespace

bool nvrtc_available(std::string* why) {
  const Api& a = api();
  if (!a.handle && why) *why = a.why;
  return a.handle != nullptr;
}

CudaBinary nvrtc_compile(const std::string& source, const std::string& arch) {
  CudaBinary out;
  const Api& a = api();
  if (!a.handle) {
    out.log = a.why;
    return out;
  }
  Program p = nullptr;
  if (int rc = a.create(&p, source.c_str(), "synoros_kernel.cu", 0, nullptr, nullptr); rc != 0) {
    out.log = std::string("nvrtcCreateProgram: ") + a.error_string(rc);
    return out;
  }
  // The engine's rounding rules: no contraction of a*b+c, IEEE division and square root.
  std::string gpu = "--gpu-architecture=" + arch;
  const char* opts[] = {gpu.c_str(), "-default-device", "--fmad=false", "--prec-div=true", "--prec-sqrt=true",
                        "--std=c++17"};
  int rc = a.compile(p, int(std::size(opts)), opts);
  size_t n = 0;
  a.log_size(p, &n);
  out.log.assign(n, '\0');
  if (n) a.log(p, out.log.data());
  while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  if (rc == 0) {
    a.ptx_size(p, &n);
    out.ptx.assign(n, '\0');
    a.ptx(p, out.ptx.data());
    while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
    a.cubin_size(p, &n);
    out.cubin.assign(n, '\0');
    if (n) a.cubin(p, out.cubin.data());
    out.ok = !out.ptx.empty() && !out.cubin.empty();
  }
  a.destroy(&p);
  return out;
}

}  // namespace synoros::kernels::jit

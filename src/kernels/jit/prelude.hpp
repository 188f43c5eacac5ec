// The headers generated kernels include (the scalar op definitions, vec_math.hpp and the vector
// traits), embedded in the library at build time so that a kernel compiled at run time uses the
// very source the engine was built from. The compiler writes them under its cache directory.
#pragma once

#include <string>
#include <vector>

namespace synoros::kernels::jit {

struct PreludeFile {
  const char* path;  // as included: "ir/scalar_ops.hpp"
  const char* text;
};
const std::vector<PreludeFile>& prelude_files();

}  // namespace synoros::kernels::jit

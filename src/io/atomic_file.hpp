// Atomic replacement of a file: write to "<path>.tmp.<pid>", fsync, rename over the target,
// fsync the directory. On any failure the temporary is removed and the target is untouched.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace synoros::io {

// Receives the bytes to append; throws synoros::Error on a write failure.
using ByteSink = std::function<void(const void* data, size_t bytes)>;

// Calls `produce` with a sink writing into the temporary, then commits it as `path`. What
// produce throws propagates after the temporary is removed. Errors name `what` and the path.
// Temporaries of earlier writes of `path` that were killed mid-save are removed first.
void write_file_atomic(const std::string& path, const std::string& what,
                       const std::function<void(const ByteSink&)>& produce);

// Removes "<path>.tmp.<pid>" files whose process no longer exists.
void remove_stale_temporaries(const std::string& path);

}  // namespace synoros::io

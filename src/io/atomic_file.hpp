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
// A symbolic link is written through (the file it names is replaced, the link stays); a path
// that is not a regular file (a device, a FIFO, a directory) is an error before anything is
// written.
// Temporaries of earlier writes of `path` that were killed mid-save are removed first.
void write_file_atomic(const std::string& path, const std::string& what,
                       const std::function<void(const ByteSink&)>& produce);

// The file a save of `path` replaces: `path`, or the file its symbolic links name (another user's
// link in a sticky directory anyone can write to is not followed). Error naming `what` when that
// is not a regular file (a device, a FIFO, a directory) or cannot be resolved.
std::string save_target(const std::string& path, const std::string& what);

// Removes "<path>.tmp.<pid>" files whose process no longer exists.
void remove_stale_temporaries(const std::string& path);

}  // namespace synoros::io

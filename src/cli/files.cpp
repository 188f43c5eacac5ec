// The command line's checks on the files a command reads and writes, made before any work.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.hpp"
#include "io/atomic_file.hpp"
#include "synoros/config.hpp"

namespace synoros::cli {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw Error("cannot read " + what + " '" + path + "'");
  return text.str();
}

void writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(what + " '" + dir + "' cannot be created: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) throw Error(what + " '" + dir + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(what + " '" + dir + "' is not writable: " + std::strerror(errno));
}
void writable_file(const std::string& path, const std::string& what, bool replaced) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(what + " '" + path + "' is a directory");
  if (!replaced && std::filesystem::exists(path, ec)) {  // written in place (a trace to /dev/stdout)
    if (::access(path.c_str(), W_OK) != 0) throw Error(what + " '" + path + "' is not writable: " + std::strerror(errno));
    return;
  }
  // A save replaces the file its links name, in that file's directory.
  std::filesystem::path p(replaced ? io::save_target(path, what) : path);
  writable_dir(p.has_parent_path() ? p.parent_path().string() : ".", what + "'s directory for");
}

}  // namespace synoros::cli

// The command line's checks on the files a command reads and writes, made before any work.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

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

namespace {
// The directories writable_dir created, each with the outermost one it made.
std::vector<std::pair<std::filesystem::path, std::filesystem::path>>& created_dirs() {
  static std::vector<std::pair<std::filesystem::path, std::filesystem::path>> dirs;
  return dirs;
}
}  // namespace

void remove_empty_created_dirs() {
  auto& dirs = created_dirs();
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    for (std::filesystem::path p = it->first;; p = p.parent_path()) {
      std::error_code ec;
      if (!std::filesystem::is_directory(p, ec) || !std::filesystem::is_empty(p, ec) || ec) break;
      std::filesystem::remove(p, ec);  // removes an empty directory only
      if (ec || p == it->second || !p.has_parent_path() || p.parent_path() == p) break;
    }
  }
  dirs.clear();
}

void writable_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  // The outermost directory this call makes, so a command that fails can take them away again.
  std::filesystem::path made, p = std::filesystem::absolute(dir, ec).lexically_normal();
  if (!p.empty() && !p.has_filename()) p = p.parent_path();  // "runs/x/": the same directory
  for (std::filesystem::path q = p; !q.empty() && !std::filesystem::exists(q, ec); q = q.parent_path()) {
    made = q;
    if (!q.has_parent_path() || q.parent_path() == q) break;
  }
  std::filesystem::create_directories(dir, ec);
  if (!ec && !made.empty()) created_dirs().emplace_back(p, made);
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

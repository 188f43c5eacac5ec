// The command line's checks on the files a command reads and writes, made before any work.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
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
// The directories writable_dir made (mkdir succeeded), in the order it made them.
std::vector<std::filesystem::path>& created_dirs() {
  static std::vector<std::filesystem::path> dirs;
  return dirs;
}
}  // namespace

void remove_empty_created_dirs() {
  auto& dirs = created_dirs();
  // The innermost first. rmdir removes an empty directory only (never a file or a link put in
  // its place), so one that filled meanwhile, or was replaced, stays.
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) ::rmdir(it->c_str());
  dirs.clear();
}

void writable_dir(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // The missing directories, made one at a time so that exactly those this call made are
  // recorded (a failed command removes them again while they are empty). The path is kept as
  // given, ".." and links included, so the kernel resolves it as it resolves every other use.
  fs::path target = fs::absolute(dir, ec);
  if (!target.empty() && !target.has_filename()) target = target.parent_path();  // "runs/x/"
  std::vector<fs::path> missing;
  for (fs::path q = target; !ec && !q.empty(); q = q.parent_path()) {
    fs::file_status st = fs::status(q, ec);
    if (st.type() != fs::file_type::not_found) break;  // there, or unreadable: create_directories says why
    ec.clear();
    missing.push_back(q);
    if (!q.has_relative_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0777) == 0)
      created_dirs().push_back(*it);
    else if (errno != EEXIST)
      break;  // create_directories below reports the cause
  }
  ec.clear();
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(what + " '" + dir + "' cannot be created: " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) throw Error(what + " '" + dir + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    throw Error(what + " '" + dir + "' is not writable: " + std::strerror(err));
  }
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

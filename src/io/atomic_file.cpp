// Atomic file replacement with POSIX calls (open/write/fsync/rename).
#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "synoros/core.hpp"

namespace synoros::io {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error (close can report a delayed write failure).
  int close() {
    int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

void fsync_directory(const std::string& path, const std::string& what) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.get() < 0) throw Error(what + " " + path + ": cannot open its directory to sync: " + errno_text(errno));
  if (::fsync(d.get()) != 0 && errno != EINVAL)  // some filesystems cannot sync directories
    throw Error(what + " " + path + ": cannot sync its directory: " + errno_text(errno));
}

}  // namespace

void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    std::string pid = name.substr(prefix.size());
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    pid_t p = pid_t(std::stol(pid));
    // A live writer (this process included) keeps its temporary; one whose process is gone was
    // killed mid-save and left it behind.
    if (p == ::getpid() || ::kill(p, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
  }
}

std::string save_target(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto not_regular = [&](const fs::file_status& st, const std::string& named) {
    return Error(what + " " + named + ": not a regular file (" +
                 (fs::is_directory(st) ? "a directory" : fs::is_fifo(st) ? "a FIFO" : "a device or socket") +
                 "); nothing was written");
  };
  const fs::file_status given = fs::status(path, ec);  // through any links, as the kernel sees it
  if (fs::exists(given) && !fs::is_regular_file(given)) throw not_regular(given, path);
  fs::path target = path;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {  // a dangling link too
    // As the kernel's protected_symlinks: a link in a sticky directory that anyone can write to
    // is followed only when it is this user's (another user's could point anywhere).
    const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    struct stat d {}, l {};
    if (::stat(dir.c_str(), &d) == 0 && ::lstat(target.c_str(), &l) == 0 && (d.st_mode & S_ISVTX) &&
        (d.st_mode & S_IWOTH) && l.st_uid != ::geteuid())
      throw Error(what + " " + path + ": " + target.string() +
                  " is another user's symbolic link in a directory anyone can write to; it is not followed");
    fs::path next = fs::read_symlink(target, ec);
    if (ec || hops == 40) throw Error(what + " " + path + ": cannot resolve the link" + (ec ? ": " + ec.message() : ""));
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) throw not_regular(st, path + " (the link's target " + target.string() + ")");
  return target.string();
}

void write_file_atomic(const std::string& given, const std::string& what,
                       const std::function<void(const ByteSink&)>& produce) {
  const std::string path = save_target(given, what);
  remove_stale_temporaries(path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw Error(what + " " + path + ": cannot create " + tmp + ": " + errno_text(errno));
  try {
    ByteSink sink = [&](const void* data, size_t bytes) {
      const char* p = static_cast<const char*>(data);
      while (bytes > 0) {
        ssize_t w = ::write(fd.get(), p, bytes);
        if (w < 0) {
          if (errno == EINTR) continue;
          throw Error(what + " " + path + ": write to " + tmp + " failed: " + errno_text(errno));
        }
        p += w;
        bytes -= size_t(w);
      }
    };
    produce(sink);
    if (::fsync(fd.get()) != 0) throw Error(what + " " + path + ": fsync of " + tmp + " failed: " + errno_text(errno));
    if (fd.close() != 0) throw Error(what + " " + path + ": close of " + tmp + " failed: " + errno_text(errno));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(what + " " + path + ": cannot rename " + tmp + " over it: " + errno_text(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_directory(path, what);
}

}  // namespace synoros::io

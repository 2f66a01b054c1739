#include "core/file_identity.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/log.h"

namespace strata {
namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool within_tree(const std::string& path, const std::string& dir) {
  std::error_code ec1, ec2;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), ec1);
  const fs::path d = fs::weakly_canonical(fs::absolute(dir), ec2);
  if (ec1 || ec2) return false;
  auto pi = p.begin();
  for (auto di = d.begin(); di != d.end(); ++di, ++pi) {
    if (di->empty() && std::next(di) == d.end()) break;  // a trailing separator
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

Status DirectoryLock::lock(const std::string& dir, const std::string& what) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return make_error(ErrorCode::kIo, what, " ", dir, ": cannot open: ", std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return make_error(ErrorCode::kConfig, what, " ", dir,
                        " is being written by another run (one run per directory: give another, "
                        "or wait for that run to end)");
    }
    if (err == EBADF || err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL) {
      STRATA_LOG(kWarn, what << " " << dir << ": the file system takes no lock ("
                             << std::strerror(err)
                             << "): a second run writing this directory would not be refused");
      return ok_status();
    }
    return make_error(ErrorCode::kIo, what, " ", dir, ": cannot lock: ", std::strerror(err));
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  return ok_status();
}

uint64_t free_bytes(const std::string& path) {
  struct statvfs v {};
  if (statvfs(path.c_str(), &v) != 0) return 0;
  return static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
}

namespace {

// Creates and removes a file in `dir` (a unique name: ranks on several hosts may probe one shared
// directory at once); the error names `what` and `shown`.
Status try_create_in(const std::string& what, const std::string& shown, const std::string& dir) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string probe = dir + "/.strata_probe_" + host + "_" + std::to_string(getpid()) + "_XXXXXX";
  const int fd = ::mkostemp(probe.data(), O_CLOEXEC);
  if (fd < 0) {
    return make_error(ErrorCode::kIo, what, " ", shown, ": cannot write in ", dir, ": ",
                      std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return ok_status();
}

}  // namespace

Status probe_directory(const std::string& what, const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_error(ErrorCode::kConfig, what, " ", dir, " is not a directory");
  }
  return try_create_in(what, dir, dir);
}

Status probe_writable(const std::string& what, const std::string& path, OutputWrite how,
                      uint64_t needed_bytes) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return make_error(ErrorCode::kConfig, what, " ", path, " is a directory (give a file name)");
  }
  // Written in place: an existing file (a regular one, /dev/null, a pipe) must open for
  // writing, without truncation; a new one needs its directory to take it.
  if (how == OutputWrite::kInPlace && fs::exists(path, ec)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno != ENXIO) {  // ENXIO: a FIFO with no reader yet
      return make_error(ErrorCode::kIo, what, " ", path,
                        ": cannot write it: ", std::strerror(errno));
    }
    if (fd >= 0) ::close(fd);
    return ok_status();
  }
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(dir, ec)) {
    return make_error(ErrorCode::kConfig, what, " ", path, ": the directory ", dir,
                      " does not exist");
  }
  STRATA_RETURN_IF_ERROR(try_create_in(what, path, dir));
  if (needed_bytes > 0) {
    const uint64_t free = free_bytes(dir);
    if (free < needed_bytes) {
      return make_error(ErrorCode::kIo, what, " ", path, ": needs ", needed_bytes, " bytes, ", free,
                        " free in ", dir);
    }
  }
  return ok_status();
}

}  // namespace strata

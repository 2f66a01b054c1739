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

Status check_free(const std::string& what, const std::string& shown, const std::string& dir,
                  uint64_t needed_bytes) {
  if (needed_bytes == 0) return ok_status();
  const uint64_t free = free_bytes(dir);
  if (free < needed_bytes) {
    return make_error(ErrorCode::kIo, what, " ", shown, ": needs ", needed_bytes, " bytes, ", free,
                      " free in ", dir);
  }
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
    if (fs::exists(dir, ec)) {
      return make_error(ErrorCode::kConfig, what, " ", path, ": ", dir, " is not a directory");
    }
    return make_error(ErrorCode::kConfig, what, " ", path, ": the directory ", dir,
                      " does not exist");
  }
  STRATA_RETURN_IF_ERROR(try_create_in(what, path, dir));
  return check_free(what, path, dir, needed_bytes);
}

Status probe_output_directory(const std::string& what, const std::string& dir,
                              const std::vector<std::string>& names, uint64_t needed_bytes) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st)) {
    return make_error(ErrorCode::kConfig, what, " ", dir,
                      " is a file; this output is a directory (give a directory's path)");
  }
  if (fs::is_directory(st)) {
    for (const std::string& name : names) {
      const fs::path p = fs::path(dir) / name;
      const fs::file_status e = fs::status(p, ec);
      if (fs::exists(e) && !fs::is_regular_file(e)) {
        return make_error(ErrorCode::kConfig, what, " ", dir, " holds ", name,
                          ", which is not a file: the save would write a file of that name "
                          "(move it away)");
      }
    }
    STRATA_RETURN_IF_ERROR(try_create_in(what, dir, dir));
    return check_free(what, dir, dir, needed_bytes);
  }
  // Created by the save: its nearest existing ancestor must be a directory that takes it.
  fs::path up = fs::absolute(dir, ec).parent_path();
  while (!up.empty() && !fs::exists(up, ec) && up != up.parent_path()) up = up.parent_path();
  if (!fs::is_directory(up, ec)) {
    return make_error(ErrorCode::kConfig, what, " ", dir, ": ", up.string(), " is not a directory");
  }
  STRATA_RETURN_IF_ERROR(try_create_in(what, dir, up.string()));
  return check_free(what, dir, up.string(), needed_bytes);
}

}  // namespace strata

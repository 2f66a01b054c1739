#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace strata {
namespace {

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a pipe";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Opens `path` read-only without blocking (a FIFO without a writer opens at once) and checks its
// type; returns the descriptor and its stat.
Result<int> open_input(const std::string& path, const std::string& what, bool allow_pipe,
                       struct stat* sb) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return make_error(ErrorCode::kIo, what, ": cannot open: ", std::strerror(errno));
  }
  if (::fstat(fd, sb) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error(ErrorCode::kIo, what, ": cannot stat: ", std::strerror(err));
  }
  if (S_ISREG(sb->st_mode) || (allow_pipe && S_ISFIFO(sb->st_mode))) return fd;
  ::close(fd);
  return make_error(ErrorCode::kConfig, what, " is ", kind_of(sb->st_mode),
                    allow_pipe ? "; a regular file or a pipe is read" : "; a regular file is read");
}

}  // namespace

Status check_regular_input(const std::string& path, const std::string& what) {
  struct stat sb {};
  STRATA_ASSIGN_OR_RETURN(const int fd, open_input(path, what, false, &sb));
  ::close(fd);
  return ok_status();
}

Result<std::string> read_input_file(const std::string& path, const std::string& what,
                                    const InputRead& how) {
  struct stat sb {};
  STRATA_ASSIGN_OR_RETURN(const int fd, open_input(path, what, how.allow_pipe, &sb));
  const bool regular = S_ISREG(sb.st_mode);
  auto too_large = [&](uint64_t bytes) {
    return make_error(ErrorCode::kConfig, what, ": ", regular ? "" : "more than ", bytes,
                      " bytes, over the ", how.max_bytes, " accepted for this file");
  };
  if (regular && static_cast<uint64_t>(sb.st_size) > how.max_bytes) {
    ::close(fd);
    return too_large(static_cast<uint64_t>(sb.st_size));
  }
  if (!regular) {  // a pipe: read to its end, blocking
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  }
  std::string text;
  char buf[1 << 16];
  uint64_t at = 0;
  for (;;) {
    const ssize_t got = regular ? ::pread(fd, buf, sizeof buf, static_cast<off_t>(at))
                                : ::read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      return make_error(ErrorCode::kIo, what, ": read: ", std::strerror(err));
    }
    if (got == 0) break;
    at += static_cast<uint64_t>(got);
    if (at > how.max_bytes) {  // a file growing under the reader, or a pipe without end
      ::close(fd);
      return too_large(how.max_bytes);
    }
    text.append(buf, static_cast<size_t>(got));
  }
  ::close(fd);
  return text;
}

}  // namespace strata

#include "model/replace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/interrupt.h"
#include "core/temp_file.h"

namespace strata::model {

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

Status write_all(int fd, const void* p, size_t bytes, const std::string& what) {
  const auto* c = static_cast<const char*>(p);
  while (bytes > 0) {
    const ssize_t w = ::write(fd, c, bytes);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return make_error(ErrorCode::kIo, what, ": write: ", errno_text());
    c += w;
    bytes -= static_cast<size_t>(w);
  }
  return ok_status();
}

Status write_replacing(const std::string& path, const std::string& what, bool sync,
                       const std::function<Status(int fd)>& body) {
  const std::string tmp = temp_path_for(path);
  const CleanupPath cleanup(tmp);  // an interrupted exit removes it (core/interrupt.h)
  STRATA_ASSIGN_OR_RETURN(const int fd, create_temp_file(path, what));
  Status st = body(fd);
  if (st.ok() && sync && ::fsync(fd) != 0) {
    st = make_error(ErrorCode::kIo, what, ": fsync: ", errno_text());
  }
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = make_error(ErrorCode::kIo, what, ": cannot rename ", tmp, ": ", errno_text());
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  // The rename itself is durable once the directory is synced.
  if (sync) sync_directory(std::filesystem::path(path).parent_path().string());
  return ok_status();
}

void sync_directory(const std::string& dir) {
  const int d = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d >= 0) {
    ::fsync(d);
    ::close(d);
  }
}

}  // namespace strata::model

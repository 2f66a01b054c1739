#include "core/temp_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace strata {
namespace fs = std::filesystem;

std::string temp_path_for(const std::string& path) {
  return path + ".tmp" + std::to_string(::getpid());
}

bool is_temp_name_of(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  return name.find_first_not_of("0123456789", prefix.size()) == std::string::npos;
}

namespace {

// Removes PATH.tmpN whose process N is gone (kill(N, 0) says ESRCH); a live one, of this run or
// another, is left alone.
void remove_stale_temps(const std::string& path) {
  const fs::path p(path);
  const std::string base = p.filename().string();
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_temp_name_of(name, base)) continue;
    const std::string digits = name.substr(base.size() + 4);
    if (digits.size() > 9) continue;  // no pid has that many digits
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || pid <= 0) continue;  // ours is handled by the caller
    if (::kill(pid, 0) != 0 && errno == ESRCH) ::unlink(e.path().c_str());
  }
}

}  // namespace

Result<int> create_temp_file(const std::string& path, const std::string& what) {
  remove_stale_temps(path);
  const std::string tmp = temp_path_for(path);
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(tmp.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST) {
    // This process's name, left by an earlier process with our pid or planted: the name (a link
    // itself, never its target) is removed and created afresh.
    ::unlink(tmp.c_str());
    fd = ::open(tmp.c_str(), kFlags, 0644);
  }
  if (fd < 0) {
    return make_error(ErrorCode::kIo, what, ": cannot create ", tmp, ": ", std::strerror(errno));
  }
  return fd;
}

}  // namespace strata

#include "nvme/swap_owner.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/log.h"

namespace strata::nvme {
namespace {

constexpr std::string_view kMagic = "strata swap owner v1\n";
constexpr std::string_view kPrefix = "strata_swap_";

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string this_host() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

bool pid_exists(int64_t pid) {
  return pid > 0 && pid <= INT_MAX && (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// The pid in a name "strata_swap_PID_...", or 0.
int64_t pid_in_name(std::string_view name) {
  name.remove_prefix(kPrefix.size());
  int64_t pid = 0;
  size_t i = 0;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) pid = pid * 10 + (name[i] - '0');
  return i > 0 && i < name.size() && name[i] == '_' ? pid : 0;
}

}  // namespace

// Field 22 of /proc/PID/stat, after the parenthesised command (which may hold spaces).
uint64_t process_start_ticks(int64_t pid) {
  const std::string stat = read_first_line(("/proc/" + std::to_string(pid) + "/stat").c_str());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return 0;
  std::istringstream rest(stat.substr(close + 2));  // from field 3 (state)
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

SwapOwner SwapOwner::self() {
  SwapOwner o;
  o.host = this_host();
  o.boot_id = read_first_line("/proc/sys/kernel/random/boot_id");
  o.pid = getpid();
  o.start_ticks = process_start_ticks(o.pid);
  return o;
}

std::string SwapOwner::encode() const {
  std::ostringstream os;
  os << kMagic << "host=" << host << "\nboot_id=" << boot_id << "\npid=" << pid
     << "\nstart_ticks=" << start_ticks << "\n";
  std::string r = os.str();
  r.resize(kSwapOwnerRecordBytes, '\0');
  return r;
}

std::optional<SwapOwner> SwapOwner::decode(std::string_view record) {
  if (record.substr(0, kMagic.size()) != kMagic) return std::nullopt;
  record.remove_prefix(kMagic.size());
  record = record.substr(0, record.find('\0'));
  SwapOwner o;
  std::istringstream in{std::string(record)};
  std::string line;
  bool has_pid = false;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "host") o.host = value;
    if (key == "boot_id") o.boot_id = value;
    if (key == "pid") {
      o.pid = std::strtoll(value.c_str(), nullptr, 10);
      has_pid = true;
    }
    if (key == "start_ticks") o.start_ticks = std::strtoull(value.c_str(), nullptr, 10);
  }
  if (!has_pid) return std::nullopt;
  return o;
}

bool SwapOwner::on_this_host() const { return host == this_host(); }

bool SwapOwner::alive() const {
  if (!on_this_host()) return false;
  if (!boot_id.empty() && boot_id != read_first_line("/proc/sys/kernel/random/boot_id")) {
    return false;
  }
  if (!pid_exists(pid)) return false;
  return start_ticks == 0 || process_start_ticks(pid) == start_ticks;
}

std::string SwapOwner::describe() const {
  return "pid " + std::to_string(pid) + " on host " + host;
}

std::string swap_file_prefix() { return std::string(kPrefix) + std::to_string(getpid()) + "_"; }

uint64_t SwapScan::kept_bytes() const {
  uint64_t n = 0;
  for (const Kept& k : kept) n += k.bytes;
  return n;
}

Result<SwapScan> clean_stale_swap_files(const std::string& dir) {
  SwapScan scan;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return make_error(ErrorCode::kIo, "nvme swap: cannot list ", dir, ": ", std::strerror(errno));
  }
  std::vector<std::string> names;
  while (const dirent* e = readdir(d)) {
    const std::string_view name = e->d_name;
    if (name.substr(0, kPrefix.size()) == kPrefix && name.size() > 4 &&
        name.substr(name.size() - 4) == ".bin") {
      names.emplace_back(name);
    }
  }
  closedir(d);
  const SwapOwner me = SwapOwner::self();
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;  // removed meanwhile
    struct stat st {};
    SwapOwner owner;
    bool recorded = false;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<uint64_t>(st.st_size) >= kSwapOwnerRecordBytes) {
      std::string record(kSwapOwnerRecordBytes, '\0');
      const off_t at = st.st_size - static_cast<off_t>(kSwapOwnerRecordBytes);
      if (pread(fd, record.data(), record.size(), at) == static_cast<ssize_t>(record.size())) {
        if (auto o = SwapOwner::decode(record)) {
          owner = *o;
          recorded = true;
        }
      }
    }
    ::close(fd);
    if (!S_ISREG(st.st_mode)) continue;
    if (!recorded) {  // an earlier version's file: the pid in its name, on this host
      owner.host = me.host;
      owner.pid = pid_in_name(name);
      if (owner.pid == 0) continue;  // not a swap file's name
    }
    const auto bytes = static_cast<uint64_t>(st.st_blocks) * 512;  // the space it holds
    if (owner.host == me.host && owner.pid == me.pid &&
        (owner.start_ticks == 0 || owner.start_ticks == me.start_ticks)) {
      continue;  // this process's own
    }
    if (!owner.on_this_host()) {
      scan.kept.push_back({path, bytes, owner.describe() + ", whose state this host cannot see"});
      continue;
    }
    if (owner.alive()) {
      scan.kept.push_back({path, bytes, owner.describe() + ", still running"});
      continue;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return make_error(ErrorCode::kIo, "nvme swap: cannot remove the stale swap file ", path,
                        " of a run that is gone (", owner.describe(), "): ", std::strerror(errno));
    }
    ++scan.removed_files;
    scan.removed_bytes += bytes;
    STRATA_LOG(kWarn, "nvme swap: removed " << path << ", a swap file left by a run that is gone ("
                                            << owner.describe() << "): " << bytes
                                            << " bytes freed");
  }
  return scan;
}

}  // namespace strata::nvme

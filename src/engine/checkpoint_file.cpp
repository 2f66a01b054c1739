#include "engine/checkpoint_file.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace strata::engine::ckpt {

using json = nlohmann::json;

void kill_point() {
  static const char* env = std::getenv("STRATA_TEST_CHECKPOINT_KILL");
  static const long at = env != nullptr ? std::atol(env) : 0;
  static const char* sig_env = std::getenv("STRATA_TEST_CHECKPOINT_SIGNAL");
  static const int sig = sig_env != nullptr ? std::atoi(sig_env) : SIGKILL;
  static std::atomic<long> seen{0};
  if (at > 0 && seen.fetch_add(1) + 1 == at) ::kill(::getpid(), sig);
}

Status io_error(const std::string& path, const char* what) {
  return make_error(ErrorCode::kIo, "checkpoint ", path, ": ", what, ": ", std::strerror(errno));
}

Status fsync_path(const std::string& path) {
  kill_point();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path, "cannot open to sync");
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? ok_status() : io_error(path, "fsync failed");
}

std::string hex(uint64_t h) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Result<HashedFile> HashedFile::create(const std::string& path, bool direct) {
  HashedFile f;
  f.path_ = path;
  if (direct) {
    auto w = nvme::DirectWriter::create(path);
    if (!w.ok()) return make_error(ErrorCode::kIo, "checkpoint ", w.status().message());
    f.direct_ = std::make_unique<nvme::DirectWriter>(std::move(*w));
  } else {
    f.fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd_ < 0) return io_error(path, "cannot create");
  }
  f.state_ = XXH3_createState();
  XXH3_64bits_reset(f.state_);
  return f;
}

HashedFile& HashedFile::operator=(HashedFile&& o) noexcept {
  std::swap(fd_, o.fd_);
  std::swap(direct_, o.direct_);
  std::swap(state_, o.state_);
  std::swap(path_, o.path_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

HashedFile::~HashedFile() {
  if (fd_ >= 0) ::close(fd_);
  if (state_ != nullptr) XXH3_freeState(state_);
}

Status HashedFile::write(const void* data, size_t n) {
  kill_point();
  const auto* p = static_cast<const char*>(data);
  XXH3_64bits_update(state_, p, n);
  bytes_ += n;
  if (direct_) {
    const Status st = direct_->append(p, n);
    return st.ok() ? st : make_error(ErrorCode::kIo, "checkpoint ", st.message());
  }
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return io_error(path_, "write failed");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return ok_status();
}

Result<json> HashedFile::finish(bool sync) {
  kill_point();
  if (direct_) {
    const Status st = direct_->finish(sync);
    direct_.reset();
    if (!st.ok()) return make_error(ErrorCode::kIo, "checkpoint ", st.message());
    return json{{"bytes", bytes_}, {"xxh3", hex(XXH3_64bits_digest(state_))}};
  }
  if (sync && ::fsync(fd_) != 0) return io_error(path_, "fsync failed");
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return io_error(path_, "close failed");
  return json{{"bytes", bytes_}, {"xxh3", hex(XXH3_64bits_digest(state_))}};
}

Status write_text(const std::string& path, const std::string& text, json* entry, bool sync) {
  STRATA_ASSIGN_OR_RETURN(HashedFile f, HashedFile::create(path));
  STRATA_RETURN_IF_ERROR(f.write(text.data(), text.size()));
  STRATA_ASSIGN_OR_RETURN(json e, f.finish(sync));
  if (entry != nullptr) *entry = e;
  return ok_status();
}

Result<json> hash_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kCorrupt, "checkpoint ", path, ": missing");
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 20);
  uint64_t bytes = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<size_t>(in.gcount());
    XXH3_64bits_update(st, buf.data(), got);
    bytes += got;
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return json{{"bytes", bytes}, {"xxh3", hex(h)}};
}

std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos &&
        fs::exists(e.path() / "DONE") && fs::exists(e.path() / "manifest.json")) {
      out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace strata::engine::ckpt

#include "engine/shared_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

namespace strata::engine {

namespace {
std::string probe_name(const std::string& dir, uint32_t token) {
  return dir + "/.strata-shared-probe-" + std::to_string(token);
}
}  // namespace

Status check_shared_directory(const std::string& dir, comm::Communicator& comm) {
  const int n = comm.size(), rank = comm.rank();
  if (n == 1) return ok_status();
  // Rank 0's file, named by a random token that crosses the ranks as a 4-byte word (a broadcast
  // copies bits); 0 says rank 0 could not make it.
  uint32_t token = 0;
  int made_errno = 0;
  std::string path;
  if (rank == 0) {
    std::random_device rd;
    for (int tries = 0; tries < 8 && token == 0; ++tries) {
      const uint32_t t = rd() | 1u;
      const int fd =
          ::open(probe_name(dir, t).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd >= 0) {
        ::close(fd);
        token = t;
        path = probe_name(dir, t);
      } else if (errno != EEXIST) {
        made_errno = errno;
        break;
      }
    }
  }
  float word = 0.0f;
  std::memcpy(&word, &token, sizeof token);
  STRATA_RETURN_IF_ERROR(comm.broadcast(&word, 1, DType::kF32, 0));
  std::memcpy(&token, &word, sizeof token);
  if (token == 0) {
    return make_error(ErrorCode::kIo, "directory ", dir, ": rank 0 cannot make a file there",
                      rank == 0 && made_errno != 0 ? std::string(": ") + std::strerror(made_errno)
                                                   : std::string());
  }
  // Which ranks do not see it, known to every rank.
  std::vector<float> missing(size_t(n), 0.0f), all(size_t(n), 0.0f);
  if (::access(probe_name(dir, token).c_str(), F_OK) != 0) missing[size_t(rank)] = 1.0f;
  Status st = comm.all_reduce(missing.data(), all.data(), missing.size(), DType::kF32);
  if (rank == 0) ::unlink(path.c_str());
  STRATA_RETURN_IF_ERROR(st);
  std::ostringstream who;
  int count = 0;
  for (int r = 0; r < n; ++r) {
    if (all[size_t(r)] == 0.0f) continue;
    who << (count++ == 0 ? "" : ", ") << r;
  }
  if (count == 0) return ok_status();
  return make_error(ErrorCode::kConfig, "directory ", dir,
                    " is not the same directory on every rank: rank", count > 1 ? "s " : " ",
                    who.str(), count > 1 ? " do" : " does",
                    " not see the file rank 0 made there (ranks on machines of their own need a "
                    "directory every machine sees: a shared filesystem)");
}

}  // namespace strata::engine

// The files of a checkpoint (engine/checkpoint.h): written in one go, synced, their xxh3 taken
// as they are written; hashed again as they are read. Internal to the checkpoint code.
// Thread safety: a HashedFile is used by one thread at a time; the functions are reentrant.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/xxh3.h"
#include "nvme/direct_writer.h"

namespace strata::engine::ckpt {

// optimizer-rankR.bin: the magic, {version, partitions} as int64, then per partition
// {index, elements} as int64 and [master | m | v] as float.
constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};
constexpr int kVersion = 2;

// Complete checkpoints under root (step_N directories with DONE and a manifest: a stray DONE
// alone does not count), oldest first.
std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& root);

// Tests of crash safety: with STRATA_TEST_CHECKPOINT_KILL=k in the environment, the process
// kills itself (SIGKILL) at the k-th point of a save (each write, sync, rename and removal),
// counted over every thread of the process. STRATA_TEST_CHECKPOINT_SIGNAL=n sends signal n
// there instead (an interrupt arriving during a save).
void kill_point();

Status io_error(const std::string& path, const char* what);  // kIo with errno's text
Status fsync_path(const std::string& path);                  // a file or directory
std::string hex(uint64_t h);                                 // 16 hex digits

// A file written in one go and synced, its xxh3 taken as it is written. Direct: through an
// nvme::DirectWriter (for the large files: the writes overlap the caller's next work and leave
// nothing in the page cache), else write(2) into the page cache.
class HashedFile {
 public:
  static Result<HashedFile> create(const std::string& path, bool direct = false);
  HashedFile() = default;
  HashedFile(HashedFile&& o) noexcept { *this = std::move(o); }
  HashedFile& operator=(HashedFile&& o) noexcept;
  ~HashedFile();
  Status write(const void* data, size_t n);
  // Synced (unless !sync) and closed; its entry for the manifest ({"bytes", "xxh3"}).
  Result<nlohmann::json> finish(bool sync = true);

 private:
  int fd_ = -1;
  std::unique_ptr<nvme::DirectWriter> direct_;
  XXH3_state_t* state_ = nullptr;
  std::string path_;
  uint64_t bytes_ = 0;
};

// `text` as a file, synced unless !sync; its manifest entry into *entry when given.
Status write_text(const std::string& path, const std::string& text, nlohmann::json* entry,
                  bool sync = true);
// The size and xxh3 of a file as it is on disk (kCorrupt naming it when it is missing).
Result<nlohmann::json> hash_file(const std::string& path);

}  // namespace strata::engine::ckpt

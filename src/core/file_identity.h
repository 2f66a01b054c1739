// Whether two paths are the same file, whether a path lies in a directory tree, and whether a
// file can be written at a path: what a run checks before it opens anything for writing, so that
// no input is ever overwritten and no output fails after hours of work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace strata {

// Both exist and are one file (device and inode: hard links and symbolic links included).
bool same_file(const std::string& a, const std::string& b);

// `path` (which need not exist) is `dir` or lies under it, after symbolic links and ".." are
// resolved as far as the paths exist.
bool within_tree(const std::string& path, const std::string& dir);

// How an output is written: a temporary file in the same directory, then a rename (model files),
// or opened where it is (logs: JSON Lines, traces).
enum class OutputWrite { kReplace, kInPlace };

// That the output at `path` can be written now: `path` is not a directory; kReplace: its
// directory exists and takes a new file (one is created and removed at once; nothing at `path`
// is touched) and the file system has `needed_bytes` free; kInPlace: an existing file opens for
// writing without truncation, or else its directory takes a new file. `what` names the output
// in the error (e.g. the flag that gave the path).
Status probe_writable(const std::string& what, const std::string& path, OutputWrite how,
                      uint64_t needed_bytes = 0);

// That a directory output (a checkpoint directory: `names` are the files a save writes or replaces
// in it) can be written now: `dir` is a directory or can be created (its nearest existing
// ancestor is a directory that takes a new file), none of `names` is there as anything but a
// file, and the file system has `needed_bytes` free (the new files are complete before the old
// ones go).
Status probe_output_directory(const std::string& what, const std::string& dir,
                              const std::vector<std::string>& names, uint64_t needed_bytes);

// That `dir` (an existing directory) takes a new file now (created and removed at once).
Status probe_directory(const std::string& what, const std::string& dir);

// An exclusive lock on a directory (flock on the directory itself: no lock file is left, and any
// exit releases it), held while the object lives: two runs never write one directory at once.
class DirectoryLock {
 public:
  DirectoryLock() = default;
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  // kConfig naming `what` and `dir` when another process holds it; kIo when it cannot be opened.
  // A file system without locks (some NFS and Lustre mounts) is not an error: one warning.
  Status lock(const std::string& dir, const std::string& what);

 private:
  int fd_ = -1;
};

// Free bytes for an unprivileged writer on the file system of `path` (an existing path), or 0.
uint64_t free_bytes(const std::string& path);

}  // namespace strata

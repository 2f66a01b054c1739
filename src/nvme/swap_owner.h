// Who owns a swap file, so that the files of a run that is gone (killed, crashed, its machine
// rebooted) are found and removed by the next run on the same directory, and those of a run
// that is alive are left alone.
//
// Each swap file ends in one 4 KiB owner record, after its data: host name, boot id, pid and
// the process's start time (clock ticks since boot, /proc/PID/stat). An owner is alive when it
// is on this host, since the same boot, and its pid is a process started at that time (a pid
// reused by another process is not the owner). Files of earlier versions carry no record: their
// owner is the pid in their name (strata_swap_PID_...), on this host.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace strata::nvme {

inline constexpr uint64_t kSwapOwnerRecordBytes = 4096;

struct SwapOwner {
  std::string host, boot_id;
  int64_t pid = 0;
  uint64_t start_ticks = 0;  // 0: unknown (a file of an earlier version)

  static SwapOwner self();
  // The record's bytes (kSwapOwnerRecordBytes, zero-padded) and back; nullopt without one.
  std::string encode() const;
  static std::optional<SwapOwner> decode(std::string_view record);
  bool on_this_host() const;
  bool alive() const;            // on this host and running (only meaningful on this host)
  std::string describe() const;  // "pid 123 on host h"
};

// A process's start time in clock ticks since boot (/proc/PID/stat), 0 when there is none.
uint64_t process_start_ticks(int64_t pid);

// The name every swap file of this process starts with.
std::string swap_file_prefix();

// Swap files found in a directory that belong to other runs.
struct SwapScan {
  uint64_t removed_files = 0, removed_bytes = 0;  // of owners that are gone
  struct Kept {
    std::string path;
    uint64_t bytes = 0;
    std::string owner;  // SwapOwner::describe(), and why it was kept
  };
  std::vector<Kept> kept;  // alive on this host, or on another host (cannot tell)
  uint64_t kept_bytes() const;
};

// Removes the swap files in `dir` whose owner is gone (one log line each, with the bytes
// freed), keeps the others (this process's own, live runs', other hosts'). kIo when a stale
// file cannot be removed.
Result<SwapScan> clean_stale_swap_files(const std::string& dir);

}  // namespace strata::nvme

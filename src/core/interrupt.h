// Interrupts (SIGINT, SIGTERM) and the files a run must not leave behind.
//
// install_interrupt_handlers(): the first SIGINT or SIGTERM only sets a flag (interrupt_signal()),
// which a long-running loop polls at its safe points to stop cleanly (its destructors remove
// what it made). A second one, or the first while no loop has said it polls
// (set_interrupt_polled(false), the default), removes every registered path (unlink, which is
// async-signal-safe), says so on stderr and exits at once with 128 + the signal's number.
//
// register_cleanup_path(): a file to remove on such an exit (swap files, files being written).
// One registered as `open_only` (a swap file: read and written through its descriptor, its name
// is not needed) is removed at the first signal already, so that nothing is left even when the
// process is killed before its safe point (mpirun's abort follows SIGTERM with SIGKILL).
// Slots are fixed (kMaxCleanupPaths) so that the handler never allocates; a path that does not
// fit is refused (-1), and its owner then simply removes it the usual way.
#pragma once

#include <string>

namespace strata {

inline constexpr int kMaxCleanupPaths = 256;

void install_interrupt_handlers();
// The first interrupting signal received (SIGINT or SIGTERM), or 0.
int interrupt_signal();
// Whether a loop polls interrupt_signal(): while false, the first signal exits at once.
void set_interrupt_polled(bool polled);
// Testing only: forget a received signal.
void clear_interrupt();

// Returns a slot (>= 0), or -1 when the path is too long or every slot is taken.
int register_cleanup_path(const std::string& path, bool open_only = false);
void unregister_cleanup_path(int slot);
// Removes every registered path now (before an exit that runs no destructors: MPI_Abort).
void remove_cleanup_paths();

// Registers a path for its lifetime (a file being written under a temporary name).
class CleanupPath {
 public:
  explicit CleanupPath(const std::string& path) : slot_(register_cleanup_path(path)) {}
  ~CleanupPath() { unregister_cleanup_path(slot_); }
  CleanupPath(const CleanupPath&) = delete;
  CleanupPath& operator=(const CleanupPath&) = delete;

 private:
  int slot_;
};

}  // namespace strata

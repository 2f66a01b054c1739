#include "core/interrupt.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <unistd.h>

namespace strata {
namespace {

constexpr size_t kMaxPathBytes = 1024;

// A slot is free (0), being written (1) or holding a path (2; 3: open_only); the handler reads
// only states 2 and 3.
struct CleanupSlot {
  std::atomic<int> state{0};
  char path[kMaxPathBytes] = {};
};

CleanupSlot g_slots[kMaxCleanupPaths];
std::atomic<int> g_signal{0};
std::atomic<bool> g_polled{false};

void write_stderr(const char* s) {
  const ssize_t rc = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)rc;
}

// Unlinks the registered paths (only the open_only ones when `open_only`); how many went.
int remove_paths(bool open_only) {
  int removed = 0;
  for (CleanupSlot& s : g_slots) {
    const int state = s.state.load();
    if ((state == 3 || (state == 2 && !open_only)) && ::unlink(s.path) == 0) ++removed;
  }
  return removed;
}

void on_signal(int sig) {
  const int saved_errno = errno;  // the interrupted code's
  const int before = g_signal.exchange(sig);
  if (before == 0 && g_polled.load()) {  // the polling loop stops at its next safe point
    remove_paths(/*open_only=*/true);
    errno = saved_errno;
    return;
  }
  remove_paths(/*open_only=*/false);
  write_stderr(sig == SIGINT ? "strata: interrupted (SIGINT)" : "strata: terminated (SIGTERM)");
  write_stderr("; exiting now (this run's swap files and partial outputs are removed)\n");
  ::_exit(128 + sig);
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int interrupt_signal() { return g_signal.load(); }
void set_interrupt_polled(bool polled) { g_polled.store(polled); }
void clear_interrupt() { g_signal.store(0); }

void remove_cleanup_paths() { remove_paths(/*open_only=*/false); }

int register_cleanup_path(const std::string& path, bool open_only) {
  if (path.size() >= kMaxPathBytes) return -1;
  for (int i = 0; i < kMaxCleanupPaths; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(open_only ? 3 : 2);
    return i;
  }
  return -1;
}

void unregister_cleanup_path(int slot) {
  if (slot < 0 || slot >= kMaxCleanupPaths) return;
  g_slots[slot].state.store(0);
}

}  // namespace strata

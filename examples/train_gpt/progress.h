// A one-line progress bar with the ETA for train_gpt when stdout is a terminal, redrawn at most
// four times a second (nothing otherwise: logs and pipes get the plain step lines only; nor
// under mpirun, which gives its ranks a terminal whatever its own output is).
#pragma once

#include <cstdint>
#include <cstdio>

#include <unistd.h>

namespace strata::train_gpt {

class Progress {
 public:
  explicit Progress(bool enabled) : tty_(enabled && ::isatty(STDOUT_FILENO) == 1) {}
  // After step `step` of `steps`, `seconds` since training started.
  void update(int64_t step, int64_t steps, double seconds) {
    if (!tty_ || (shown_ && seconds - drawn_at_ < 0.25)) return;
    drawn_at_ = seconds;
    const int width = 30;
    const double done = static_cast<double>(step) / static_cast<double>(steps);
    const int filled = static_cast<int>(done * width);
    const double eta = step > 0 ? seconds / static_cast<double>(step) * double(steps - step) : 0;
    std::printf("\r[");
    for (int i = 0; i < width; ++i) std::putchar(i < filled ? '=' : (i == filled ? '>' : ' '));
    std::printf("] %5.1f%% step %lld/%lld, ETA %02d:%02d:%02d", 100.0 * done,
                static_cast<long long>(step), static_cast<long long>(steps),
                static_cast<int>(eta / 3600), static_cast<int>(eta / 60) % 60,
                static_cast<int>(eta) % 60);
    std::fflush(stdout);
    shown_ = true;
  }
  // Before a line of its own: the bar's line erased.
  void clear() {
    if (!shown_) return;
    std::printf("\r\033[K");
    shown_ = false;
  }

 private:
  bool tty_ = false;
  bool shown_ = false;
  double drawn_at_ = 0.0;
};

}  // namespace strata::train_gpt

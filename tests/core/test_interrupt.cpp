// core/interrupt.h: the first signal is only noted while a loop polls; a second one, or the
// first while none polls, removes the registered files and exits with 128 + the signal.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/interrupt.h"

namespace strata {
namespace {

// The same name in the test and in its death-test child (which runs the test body again).
std::string temp_file(const char* tag) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/strata_interrupt_test_" + tag;
  std::ofstream(path) << "partial";
  return path;
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

TEST(InterruptDeathTest, UnpolledSignalRemovesRegisteredFilesAndExits) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = temp_file("unpolled");
  EXPECT_EXIT(
      {
        install_interrupt_handlers();
        register_cleanup_path(path);
        raise(SIGTERM);
        std::fprintf(stderr, "still running\n");
        _exit(0);
      },
      ::testing::ExitedWithCode(128 + SIGTERM), "terminated \\(SIGTERM\\); exiting now");
  EXPECT_FALSE(exists(path));
}

// Polled: the first signal is noted and removes only the open_only paths (swap files), the
// second exits.
TEST(InterruptDeathTest, PolledSignalIsNotedAndASecondOneExits) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path = temp_file("polled");
  const std::string swap = temp_file("swap");
  EXPECT_EXIT(
      {
        install_interrupt_handlers();
        set_interrupt_polled(true);
        const int slot = register_cleanup_path(path);
        register_cleanup_path(swap, /*open_only=*/true);
        raise(SIGINT);
        if (interrupt_signal() != SIGINT || !exists(path) || exists(swap)) _exit(3);
        std::fprintf(stderr, "noted\n");
        unregister_cleanup_path(slot);  // an unregistered file stays
        register_cleanup_path(path + ".missing");
        raise(SIGINT);
        _exit(4);
      },
      ::testing::ExitedWithCode(128 + SIGINT), "noted\n.*interrupted \\(SIGINT\\)");
  EXPECT_TRUE(exists(path));
  std::remove(path.c_str());
}

TEST(Interrupt, CleanupSlotsAreReused) {
  for (int i = 0; i < 3 * kMaxCleanupPaths; ++i) {
    const int slot = register_cleanup_path("/nonexistent/strata_" + std::to_string(i));
    ASSERT_GE(slot, 0) << i;
    unregister_cleanup_path(slot);
  }
  EXPECT_EQ(register_cleanup_path(std::string(5000, 'x')), -1);
}

}  // namespace
}  // namespace strata

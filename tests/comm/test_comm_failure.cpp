// A failing rank makes the others stop within a bounded time, never hang: mpirun runs
// comm_fail_helper with 3 ranks (rank 1 fails) and must exit non-zero within kBoundS seconds with
// the expected message. Not a speed test: the bound is generous (the watchdog is 2 s).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

constexpr double kBoundS = 90.0;

struct RunResult {
  bool finished = false;  // false: killed after kBoundS
  int exit_code = -1;
  std::string output;
};

RunResult run_job(const std::string& mode) {
  std::vector<std::string> args = {STRATA_MPIEXEC};
  if (getuid() == 0) args.push_back("--allow-run-as-root");
  for (const char* a : {"--oversubscribe", "-np", "3"}) args.push_back(a);
  args.push_back(STRATA_FAIL_HELPER);
  args.push_back(mode);
  int pipe_fd[2];
  if (pipe(pipe_fd) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(pipe_fd[1], 1);
    dup2(pipe_fd[1], 2);
    close(pipe_fd[0]);
    close(pipe_fd[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(pipe_fd[1]);
  RunResult result;
  const auto start = std::chrono::steady_clock::now();
  bool eof = false;
  int status = 0;
  for (;;) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > kBoundS) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    if (!eof) {
      pollfd p{pipe_fd[0], POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[4096];
        const ssize_t got = read(pipe_fd[0], buf, sizeof(buf));
        if (got > 0) {
          result.output.append(buf, static_cast<size_t>(got));
        } else {
          eof = true;
        }
      }
    } else {
      usleep(100000);
    }
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      result.finished = true;
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // Drain what is left.
      char buf[4096];
      ssize_t got;
      while ((got = read(pipe_fd[0], buf, sizeof(buf))) > 0) result.output.append(buf, got);
      break;
    }
  }
  close(pipe_fd[0]);
  return result;
}

TEST(CommFailure, AbortingRankStopsTheJobWithItsMessage) {
  const RunResult r = run_job("abort");
  ASSERT_TRUE(r.finished) << "job still running after " << kBoundS << " s:\n" << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 of 3 aborting"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("injected failure on rank 1"), std::string::npos) << r.output;
}

TEST(CommFailure, WatchdogNamesTheHungCollective) {
  const RunResult r = run_job("hang");
  ASSERT_TRUE(r.finished) << "job still running after " << kBoundS << " s:\n" << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all_reduce #1 (count 1024, f32, sum) did not complete within 2 s"),
            std::string::npos)
      << r.output;
}

TEST(CommFailure, CrashedRankEndsTheJob) {
  const RunResult r = run_job("crash");
  ASSERT_TRUE(r.finished) << "job still running after " << kBoundS << " s:\n" << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
}

}  // namespace

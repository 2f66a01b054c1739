// Test helper: runs an MPI job under mpirun with a time bound and collects its output and exit
// code (tests that a failing rank stops the whole job, never hangs).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace strata::test {

struct RunResult {
  bool finished = false;  // false: killed after the bound
  int exit_code = -1;
  std::string output;
};

// Runs `mpiexec [--allow-run-as-root] --oversubscribe -np ranks program args...`, killing it
// (its whole process group) after bound_s seconds.
inline RunResult run_mpi_job(const std::string& mpiexec, int ranks, const std::string& program,
                             const std::vector<std::string>& program_args, double bound_s) {
  std::vector<std::string> args = {mpiexec};
  if (getuid() == 0) args.push_back("--allow-run-as-root");
  for (const std::string a : {"--oversubscribe", "-np"}) args.push_back(a);
  args.push_back(std::to_string(ranks));
  args.push_back(program);
  for (const auto& a : program_args) args.push_back(a);
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
    if (waited > bound_s) {
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
      while ((got = read(pipe_fd[0], buf, sizeof(buf))) > 0) {
        result.output.append(buf, static_cast<size_t>(got));
      }
      break;
    }
  }
  close(pipe_fd[0]);
  return result;
}

}  // namespace strata::test

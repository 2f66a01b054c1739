// A collective enqueued on a stream (Communicator::enqueue: the link lane) whose peer never
// arrives ends the job within a bounded time, naming the collective, instead of leaving the
// stream and the step waiting forever: mpirun runs nccl_fail_helper with 2 ranks (rank 1 stays
// away). Needs a CUDA device per rank (a GPU, or the emulated runtime); skips otherwise. Not a
// speed test: the bound is generous (the watchdog is 2 s).
#include <gtest/gtest.h>

#include <string>

#include "mpi_job.h"

namespace {

constexpr double kBoundS = 90.0;

TEST(NcclFailure, WatchdogEndsAStreamWaitingForADeadPeer) {
  const strata::test::RunResult r =
      strata::test::run_mpi_job(STRATA_MPIEXEC, 2, STRATA_NCCL_FAIL_HELPER, {}, kBoundS);
  ASSERT_TRUE(r.finished) << "job still running after " << kBoundS << " s:\n" << r.output;
  if (r.exit_code == 3) GTEST_SKIP() << "fewer CUDA devices than ranks on this machine";
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 0 of 2 aborting: comm: all_reduce #1 (count 1024, f32, sum) did "
                          "not complete within 2 s on its stream"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("synchronize returned"), std::string::npos)
      << "the stream's synchronisation returned:\n"
      << r.output;
}

}  // namespace

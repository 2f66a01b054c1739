// A failing rank makes the others stop within a bounded time, never hang: mpirun runs
// comm_fail_helper with 3 ranks (rank 1 fails) and must exit non-zero within kBoundS seconds with
// the expected message. Not a speed test: the bound is generous (the watchdog is 2 s).
#include <gtest/gtest.h>

#include <string>

#include "mpi_job.h"

namespace {

using strata::test::RunResult;

constexpr double kBoundS = 90.0;

RunResult run_job(const std::string& mode) {
  return strata::test::run_mpi_job(STRATA_MPIEXEC, 3, STRATA_FAIL_HELPER, {mode}, kBoundS);
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

// An NVMe fault during a ZeRO step (the store's EIO injection on rank 1 of 2, stage 3, all the
// optimizer state on NVMe) stops the whole job with the error, never hangs: mpirun runs
// zero_fault_helper, which must exit non-zero within kBoundS seconds naming the failing rank and
// the I/O error. Not a speed test: the bound is generous.
#include <gtest/gtest.h>

#include <string>

#include "mpi_job.h"
#include "scratch_dir.h"

namespace {

constexpr double kBoundS = 120.0;

TEST(ZeroFault, NvmeFaultOnOneRankStopsEveryRank) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const strata::test::RunResult r =
      strata::test::run_mpi_job(STRATA_MPIEXEC, 2, STRATA_FAULT_HELPER, {dir.path()}, kBoundS);
  ASSERT_TRUE(r.finished) << "job still running after " << kBoundS << " s:\n" << r.output;
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 of 2 aborting"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Input/output error"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("without a failure"), std::string::npos) << r.output;
}

}  // namespace

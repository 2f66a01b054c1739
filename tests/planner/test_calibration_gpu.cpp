// planner::calibrate on a CudaDevice (label gpu; skipped without a GPU). On the emulated runtime
// of CI it runs in strict mode, where an async copy from pageable host memory is an error (the
// device contract, DESIGN.md §3: enqueued copies come from pinned memory, set-up copies from a
// vector are synchronous): every rate is measured, none of its copies was pageable.
#include <gtest/gtest.h>

#if defined(STRATA_CUDA_EMULATE) && STRATA_CUDA_EMULATE
#include "cuda_emu.h"
#endif

#include "comm/local_comm.h"
#include "gpu/device.h"
#include "planner/calibration.h"
#include "scratch_dir.h"
#include "tiny_calibration.h"

namespace strata::engine {
namespace {
using namespace ::strata::planner;  // the planner under test (src/planner)

TEST(CalibrationGpu, MeasuresEveryRateWithoutPageableAsyncCopies) {
  if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU";
#if defined(STRATA_CUDA_EMULATE) && STRATA_CUDA_EMULATE
  cuda_emu::set_strict(true);
  const uint64_t pageable = cuda_emu::counters().pageable_copies;
#endif
  gpu::DeviceOptions dopt;
  dopt.memory_limit_bytes = size_t{512} << 20;
  auto dev = gpu::create_device(gpu::DeviceKind::kCuda, dopt);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  auto world = comm::create_local_comm();
  test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  const CalibrationRequest rq = planner::testing::tiny_calibration_request(
      **dev, *world, dir.path() + "/calibration.json", DType::kBF16);
  auto c = calibrate(rq);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_GT(c->measured, 0);
  for (sched::Work w :
       {sched::Work::kFlops, sched::Work::kH2DBytes, sched::Work::kD2HBytes,
        sched::Work::kAdamElements, sched::Work::kDeviceAdamElements, sched::Work::kDeviceBytes}) {
    EXPECT_GT(c->rates.rate(w), 0.0) << sched::work_name(w);
  }
#if defined(STRATA_CUDA_EMULATE) && STRATA_CUDA_EMULATE
  EXPECT_EQ(cuda_emu::counters().pageable_copies, pageable);
  cuda_emu::set_strict(false);
#endif
}

}  // namespace
}  // namespace strata::engine

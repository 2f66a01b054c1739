// DeviceOptimizer::choose: which partitions --gpu-optimizer-fraction puts on the device (the last
// ones in partition order, to the nearest partition of the share), and that create() moves
// exactly those (label unit; the bits of its Adam are tested with the ZeRO and planned steps).
#include <gtest/gtest.h>

#include <vector>

#include "engine/device_optimizer.h"
#include "gpu/cpu_device.h"

namespace strata::engine {
namespace {

OffloadedOptimizer make_optimizer() {
  return OffloadedOptimizer::create({10, 20, 30, 40}, cpu::CpuAdam(cpu::AdamHyper{}), {}).value();
}

TEST(DeviceOptimizer, ChoosesTheLastPartitionsToTheNearestShare) {
  const OffloadedOptimizer opt = make_optimizer();
  using V = std::vector<bool>;
  EXPECT_EQ(DeviceOptimizer::choose(opt, 0.0), (V{false, false, false, false}));
  EXPECT_EQ(DeviceOptimizer::choose(opt, 1.0), (V{true, true, true, true}));
  // 40 of 100 elements is nearest to 0.3 and to 0.5 (70 is further from 50 than 40 is).
  EXPECT_EQ(DeviceOptimizer::choose(opt, 0.3), (V{false, false, false, true}));
  EXPECT_EQ(DeviceOptimizer::choose(opt, 0.5), (V{false, false, false, true}));
  EXPECT_EQ(DeviceOptimizer::choose(opt, 0.7), (V{false, false, true, true}));
  EXPECT_EQ(DeviceOptimizer::choose(opt, 0.1), (V{false, false, false, false}));
}

TEST(DeviceOptimizer, MovesOnlyTheChosenPartitions) {
  OffloadedOptimizer opt = make_optimizer();
  gpu::DeviceOptions o;
  o.threads = 1;
  auto dev = gpu::create_cpu_device(o).value();
  auto stream = dev->create_stream().value();
  auto d = DeviceOptimizer::create(opt, *dev, *stream, DeviceOptimizer::choose(opt, 0.7));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FALSE(d->on_device(0));
  EXPECT_FALSE(d->on_device(1));
  EXPECT_TRUE(d->on_device(2));
  EXPECT_TRUE(d->on_device(3));
  EXPECT_EQ(d->bytes(), 12u * (30 + 40));
}

}  // namespace
}  // namespace strata::engine

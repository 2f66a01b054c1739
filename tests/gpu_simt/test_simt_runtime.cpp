// The SIMT emulator itself (simt.h): indices, shuffles, barriers and launch limits behave as on a
// GPU, and the bugs it exists to catch are caught: a missing barrier (different bits in the two
// thread orders), a barrier or shuffle that not all threads reach, uninitialised shared memory,
// launches outside sm_90's limits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "simt.h"

namespace {

// out[global linear thread id] = global id, computed from the built-ins.
__global__ void index_kernel(int* out) {
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[b * per_block + t] = static_cast<int>(b * per_block + t);
}

TEST(SimtRuntime, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  const dim3 grid(3, 2, 2), block(32, 4, 2);
  std::vector<int> out(3 * 2 * 2 * 32 * 4 * 2, -1);
  index_kernel | simt::config(grid, block) % simt::args(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << simt::take_last_message();
  std::vector<int> expected(out.size());
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(out, expected);
}

// out[lane] = (xor-butterfly sum over the warp, value broadcast from lane 5, lane 3's value
// seen by lane ^ 3).
__global__ void shuffle_kernel(float* out) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  float v = static_cast<float>(lane);
  float sum = v;
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float from5 = __shfl_sync(0xffffffffu, v, 5);
  const float xor3 = __shfl_xor_sync(0xffffffffu, v, 3);
  out[3 * threadIdx.x] = sum;
  out[3 * threadIdx.x + 1] = from5;
  out[3 * threadIdx.x + 2] = xor3;
}

TEST(SimtRuntime, WarpShufflesExchangeWithinEachWarp) {
  std::vector<float> out(3 * 64);
  shuffle_kernel | simt::config(1, 64) % simt::args(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << simt::take_last_message();
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32;
    EXPECT_EQ(out[3 * t], 496.0f) << t;  // 0 + 1 + ... + 31
    EXPECT_EQ(out[3 * t + 1], 5.0f) << t;
    EXPECT_EQ(out[3 * t + 2], static_cast<float>(lane ^ 3)) << t;
  }
}

// Each thread writes its slot of shared memory, then reads its neighbour's: with the barrier the
// neighbour has written this launch's value; without it, it may not have yet.
template <bool kBarrier>
__global__ void neighbour_kernel(int* out, int tag) {
  __shared__ int slots[64];
  const int t = static_cast<int>(threadIdx.x);
  slots[t] = t + 1 + tag;
  if (kBarrier) __syncthreads();
  out[t] = slots[(t + 1) % 64] - tag;  // t + 2 (mod 64) when the neighbour's write is seen
}

std::vector<int> run_neighbours(bool barrier, simt::Order order, int tag) {
  simt::set_order(order);
  std::vector<int> out(64, -1);
  if (barrier) {
    neighbour_kernel<true> | simt::config(1, 64) % simt::args(out.data(), tag);
  } else {
    neighbour_kernel<false> | simt::config(1, 64) % simt::args(out.data(), tag);
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << simt::take_last_message();
  simt::set_order(simt::Order::kForward);
  return out;
}

TEST(SimtRuntime, AMissingBarrierGivesDifferentBitsInTheTwoOrders) {
  std::vector<int> expected(64);
  for (int t = 0; t < 64; ++t) expected[t] = (t + 1) % 64 + 1;
  EXPECT_NE(run_neighbours(false, simt::Order::kForward, 1000),
            run_neighbours(false, simt::Order::kReverse, 2000));
  EXPECT_EQ(run_neighbours(true, simt::Order::kForward, 3000), expected);
  EXPECT_EQ(run_neighbours(true, simt::Order::kReverse, 4000), expected);
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void shuffle_after_exit_kernel(float* out) {
  if (threadIdx.x == 7) return;
  out[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 0);
}

TEST(SimtRuntime, BarriersAndShufflesNotAllThreadsReachAreLaunchErrors) {
  std::vector<int> out(64);
  divergent_barrier_kernel | simt::config(1, 64) % simt::args(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  std::string msg = simt::take_last_message();
  EXPECT_NE(msg.find("__syncthreads reached by 48 of 64 threads"), std::string::npos) << msg;

  std::vector<float> f(32);
  shuffle_after_exit_kernel | simt::config(1, 32) % simt::args(f.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  msg = simt::take_last_message();
  EXPECT_NE(msg.find("31 at a warp shuffle"), std::string::npos) << msg;

  // A launch after a failed one runs normally.
  index_kernel | simt::config(1, 32) % simt::args(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << simt::take_last_message();
}

__global__ void read_shared_kernel(float* out, int n) {
  float* dyn = simt::dynamic_shared<float>();  // extern __shared__ float dyn[];
  if (threadIdx.x == 0) out[0] = dyn[n - 1];
}

TEST(SimtRuntime, DynamicSharedMemoryStartsAsNaNAndIsLimitedAsOnSm90) {
  std::vector<float> out(1, 0.0f);
  const int floats = 1024;
  read_shared_kernel | simt::config(1, 32, floats * sizeof(float)) % simt::args(out.data(), floats);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << simt::take_last_message();
  EXPECT_TRUE(std::isnan(out[0]));

  const size_t big = size_t{64} << 10;
  read_shared_kernel | simt::config(1, 32, big) % simt::args(out.data(), 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  (void)simt::take_last_message();
  ASSERT_EQ(cudaFuncSetAttribute(read_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(big)),
            cudaSuccess);
  read_shared_kernel | simt::config(1, 32, big) % simt::args(out.data(), 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << simt::take_last_message();
  EXPECT_EQ(cudaFuncSetAttribute(read_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 << 10),
            cudaErrorInvalidValue);
  (void)simt::take_last_message();
}

TEST(SimtRuntime, LaunchShapesOutsideSm90LimitsAreRefused) {
  std::vector<int> out(4096);
  index_kernel | simt::config(1, 2048) % simt::args(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  index_kernel | simt::config(dim3(1, 65536), 32) % simt::args(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  index_kernel | simt::config(dim3(1), dim3(1, 1, 65)) % simt::args(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_NE(simt::take_last_message().find("outside sm_90's limits"), std::string::npos);
}

}  // namespace

// The device a device-generic test runs on, chosen when it is built: the CpuDevice (default),
// a CUDA GPU (STRATA_TEST_CUDA=1) or the CUDA kernels on the SIMT emulator of tests/gpu_simt
// (STRATA_TEST_SIMT=1, linking strata_simt). Used by the kernel conformance suite and test_gpt.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "gpu/device.h"

#ifndef STRATA_TEST_CUDA
#define STRATA_TEST_CUDA 0
#endif
#ifndef STRATA_TEST_SIMT
#define STRATA_TEST_SIMT 0
#endif
#ifndef STRATA_CUDA_EMULATE
#define STRATA_CUDA_EMULATE 0
#endif
#if STRATA_TEST_SIMT
#include "simt_device.h"
#endif

namespace strata::gpu::test {

// The CUDA device under test is the emulated runtime of tests/cuda_emu (every CUDA thread a
// fiber: tests shorten their runs there).
inline constexpr bool kEmulatedCuda = STRATA_TEST_CUDA && STRATA_CUDA_EMULATE;

inline DeviceKind tested_kind() { return STRATA_TEST_CUDA ? DeviceKind::kCuda : DeviceKind::kCpu; }
// True when the kernels under test are the CUDA backend's (on a GPU or on the SIMT emulator).
inline bool cuda_kernels() { return STRATA_TEST_CUDA || STRATA_TEST_SIMT; }

// The device under test, or null with `skip_reason` set when there is none to test (the CUDA
// variant on a machine without a GPU). A device that should be there but cannot be created is
// a test failure as well as a null.
inline std::unique_ptr<Device> open_tested_device(const DeviceOptions& options,
                                                  std::string& skip_reason) {
  if (tested_kind() == DeviceKind::kCuda && cuda_device_count() == 0) {
    skip_reason = "no CUDA GPU on this machine";
    return nullptr;
  }
#if STRATA_TEST_SIMT
  auto dev = create_simt_device(options);
#else
  auto dev = create_device(tested_kind(), options);
#endif
  if (!dev.ok()) {
    ADD_FAILURE() << "device creation failed: " << dev.status().to_string();
    skip_reason = dev.status().to_string();
    return nullptr;
  }
  return std::move(dev).value();
}

}  // namespace strata::gpu::test

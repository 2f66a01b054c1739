// What the emulated runtime's parts (emu_runtime.cpp, emu_cublaslt.cpp, emu_nccl.cpp) share: the
// calling thread's error slot, the device-memory registry and the streams' work queues.
// Thread safety: every function may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>

#include "cuda_emu.h"
#include "include/cuda_runtime_api.h"

namespace cuda_emu::detail {

// Records `err` with `message` in the calling thread's last-error slot; returns err.
cudaError_t fail(cudaError_t err, const std::string& message);
// cudaErrorNotPermitted (recorded) when called from a host function, else cudaSuccess; every API
// entry point starts with it.
cudaError_t enter(const char* api);
int current_device();
// The device of [p, p + bytes) when it lies inside one cudaMalloc range, else -1.
int device_of(const void* p, size_t bytes);
// The device of a live stream (null: the legacy default stream of the current device), or -1.
int stream_device(cudaStream_t stream);
// Appends `work` to the stream's queue (after checking the handle and the device's sticky
// error). `api` names the caller in errors.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work, const char* api);
// A fault found while work runs on a stream: the device's sticky error from then on.
void set_sticky(int device, cudaError_t err, const std::string& message);

struct AtomicCounters {
  std::atomic<uint64_t> launches{0}, async_copies{0}, pageable_copies{0}, host_functions{0},
      matmuls{0}, heuristics{0}, collectives{0}, set_device_calls{0};
};
AtomicCounters& counters();

}  // namespace cuda_emu::detail

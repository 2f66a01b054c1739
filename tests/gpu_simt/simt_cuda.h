// The CUDA surface the kernels of src/gpu/cuda use, for running them on CPU threads in tests
// (see simt.h): the runtime API types and calls of launch.h, the 16-bit types of cuda_fp16.h and
// cuda_bf16.h, the function qualifiers and the launch syntax (translate_cu.cmake rewrites
// `k<<<cfg>>>(args)` to `k | simt::config(cfg) % simt::args(args)` and `extern __shared__` arrays
// to simt::dynamic_shared()). The headers in shim/ stand in for the CUDA headers and include this
// one (shim/cuda_runtime.h also simt_builtins.h: the built-in indices, __syncthreads and warp
// shuffles); the translation units compiled with them define `cuda` as `simt_cuda`, so the emulated
// strata::gpu::cuda code never meets the real one at link time.
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/dtype.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __align__(n) alignas(n)
// One block runs at a time on an OS thread, and its CUDA threads are fibers of that OS thread.
#define __shared__ static thread_local

// CUDA's codes (the same numbers as driver_types.h) for the errors the emulators report.
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotPermitted = 800,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
struct CUstream_st;
using cudaStream_t = CUstream_st*;

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

namespace simt {
// CUDA's name of each code above.
inline const char* error_name(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotPermitted: return "cudaErrorNotPermitted";
  }
  return "cudaErrorUnknown";
}
}  // namespace simt

// The last launch error of this OS thread, cleared by the call (as in CUDA).
cudaError_t cudaGetLastError();
const char* cudaGetErrorName(cudaError_t err);
const char* cudaGetErrorString(cudaError_t err);

namespace simt {

// A kernel's identity (its address) for per-kernel attributes.
template <typename F>
uintptr_t kernel_key(F* f) {
  uintptr_t key = 0;
  static_assert(sizeof(f) == sizeof(key));
  std::memcpy(&key, &f, sizeof(key));
  return key;
}
cudaError_t set_attribute(uintptr_t kernel, cudaFuncAttribute attr, int value);

// The calling CUDA thread's built-in variables.
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
// The block's dynamic shared memory (filled with NaN bytes when each block starts).
void* dynamic_shared_bytes();
template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(dynamic_shared_bytes());
}

void sync_block();
// Lane `src_lane` of the calling warp's `payload`s; every lane of `mask` must call it.
uint64_t warp_exchange(unsigned mask, uint64_t payload, int src_lane, int width);
// The calling thread's lane in its warp.
int lane_id();
// Ends the running block with a launch error carrying `message` (never returns to the kernel).
[[noreturn]] void kernel_error(const std::string& message);
// Returns when all 32 lanes of the calling warp have reached it (a warp-collective operation).
void warp_converge();

template <typename T>
T shuffle(unsigned mask, T v, int src_lane, int width) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t payload = 0;
  std::memcpy(&payload, &v, sizeof(T));
  payload = warp_exchange(mask, payload, src_lane, width);
  T out;
  std::memcpy(&out, &payload, sizeof(T));
  return out;
}

struct Config {
  dim3 grid;
  dim3 block;
  size_t shared_bytes;
  cudaStream_t stream;
};
inline Config config(dim3 grid, dim3 block, size_t shared_bytes = 0,
                     cudaStream_t stream = nullptr) {
  return Config{grid, block, shared_bytes, stream};
}
template <typename... A>
struct Args {
  std::tuple<A...> values;
};
template <typename... A>
Args<std::decay_t<A>...> args(A&&... a) {
  return {std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
}
template <typename... A>
struct Bound {
  Config config;
  std::tuple<A...> values;
};
template <typename... A>
Bound<A...> operator%(Config c, Args<A...> a) {
  return {c, std::move(a.values)};
}

// The launch limits of sm_90 (see simt.h): cudaSuccess, or the error, recorded as the calling
// thread's last error with its message.
cudaError_t check_launch(const Config& config, uintptr_t kernel);
// Runs `body` once for every thread of the grid (see simt.h); records the launch error.
void run_grid(const Config& config, uintptr_t kernel, void (*body)(void*), void* context);

// A launch: its grid, the kernel's call with its arguments (body(context)), and how to free the
// context. A launch hook (the emulated CUDA runtime of tests/cuda_emu) may take a launch onto its
// stream (returning true: it runs and frees it later); otherwise the launch runs at once on the
// calling thread (the SIMT device's way).
struct Launch {
  Config config;
  uintptr_t kernel;
  void (*body)(void*);
  void* context;
  void (*destroy)(void*);
};
using LaunchHook = bool (*)(const Launch& launch);
void set_launch_hook(LaunchHook hook);
void launch(const Launch& launch);

template <typename... P, typename... A>
void operator|(void (*kernel)(P...), Bound<A...> bound) {
  struct Context {
    void (*kernel)(P...);
    std::tuple<A...> values;
  };
  launch(Launch{bound.config, kernel_key(kernel),
                [](void* p) {
                  auto* c = static_cast<Context*>(p);
                  std::apply([c](const auto&... v) { c->kernel(static_cast<P>(v)...); }, c->values);
                },
                new Context{kernel, std::move(bound.values)},
                [](void* p) { delete static_cast<Context*>(p); }});
}

}  // namespace simt

template <typename F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  return simt::set_attribute(simt::kernel_key(kernel), attr, value);
}

struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
inline float __half2float(__half h) { return strata::f16_to_f32(h.bits); }
inline __half __float2half_rn(float f) { return __half{strata::f32_to_f16(f)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return strata::bf16_to_f32(b.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{strata::f32_to_bf16(f)}; }

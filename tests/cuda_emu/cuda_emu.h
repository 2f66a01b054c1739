// The emulated CUDA runtime (a test library, built with -DSTRATA_CUDA_EMULATE=ON): the CUDA
// runtime, cuBLASLt and NCCL functions strata calls (include/*.h), implemented on CPU threads with
// CUDA's documented semantics, so that the real CudaDevice, CudaStream, CudaEvent, cuda_matmul.cpp
// and NcclComm, and the engine on top of them, run unmodified on machines without a GPU (CI).
// docs/building.md lists the functions, what is checked and what cannot be.
//
// The rules it enforces:
//  - devices: STRATA_CUDA_EMU_DEVICES of them (default 2), each with STRATA_CUDA_EMU_MEMORY_MIB of
//    memory (default 2048) and sm_90's launch limits; the current device is per host thread;
//    device memory is a registry of cudaMalloc ranges, and a copy, memset, kernel argument of
//    cuBLASLt or NCCL buffer outside one is an error;
//  - streams are in-order workers (one thread each); events complete when the work before their
//    record has; cudaStreamWaitEvent waits for the record current at the call; cudaEventQuery's
//    not-ready is an error in the calling thread's last-error slot, as CUDA reports it;
//  - cudaLaunchHostFunc functions run on one host-function thread, in stream order, and any CUDA
//    call made there fails with cudaErrorNotPermitted;
//  - kernels run on their stream's worker through the SIMT emulator (tests/gpu_simt); launch
//    limits fail at the launch, faults inside a kernel make a sticky cudaErrorLaunchFailure;
//  - host memory is registered (cudaHostRegister) or pageable. Strict mode (the default; set
//    STRATA_CUDA_EMU_STRICT=0 to leave it) makes cudaMemcpyAsync to or from pageable memory an
//    error naming the buffer; outside strict mode such a copy is synchronous, as CUDA may make it.
//    Synchronous cudaMemcpy accepts pageable memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cuda_emu {

// Strict mode (see above) for the whole process.
void set_strict(bool strict);
bool strict();

// Counts since the process started (for tests of the runtime itself).
struct Counters {
  uint64_t launches = 0;          // kernels run
  uint64_t async_copies = 0;      // cudaMemcpyAsync calls accepted
  uint64_t pageable_copies = 0;   // of which with pageable host memory (outside strict mode)
  uint64_t host_functions = 0;    // cudaLaunchHostFunc functions run
  uint64_t matmuls = 0;           // cublasLtMatmul calls run
  uint64_t heuristics = 0;        // cublasLtMatmulAlgoGetHeuristic calls answered
  uint64_t collectives = 0;       // NCCL operations run
  uint64_t set_device_calls = 0;  // cudaSetDevice calls
};
Counters counters();

}  // namespace cuda_emu

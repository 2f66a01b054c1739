// A SIMT emulator for the CUDA kernels of src/gpu/cuda, so that their logic runs, and is tested
// against the float64 references, on machines without a GPU (CI). It is a test harness, not a
// device: it says nothing about speed, and a kernel must still pass on a real GPU.
//
// How it runs a launch: blocks one after another on the calling OS thread; the threads of a
// block are fibers (ucontext) that run until they reach __syncthreads, a warp shuffle or their
// end. A barrier opens when every thread of the block is waiting at it; a shuffle when all 32
// lanes of the warp are at it (full masks only). Everything else CUDA leaves undefined or hangs
// on is a launch error with a message (cudaErrorLaunchFailure): __syncthreads reached by some
// threads of a block while others have exited, a shuffle that some lanes of the warp never
// reach, a shuffle in a partial warp. Launch limits are those of sm_90: at most 1024 threads per
// block (z at most 64), grid y and z at most 65535, dynamic shared memory above 48 KiB only after
// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) allowed it and never above 227 KiB
// (cudaErrorInvalidConfiguration / cudaErrorInvalidValue, as on the GPU).
//
// Finding races: the schedule is warp-serial (each warp runs, its shuffles opening as its lanes
// reach them, until it waits at __syncthreads or ends, before the next warp starts), and the
// order of warps and of lanes is set per OS thread (forward or reverse index). A kernel that
// reads what another thread of its block writes without a barrier in between gives different
// bits in the two orders, or wrong ones in both. Dynamic shared memory is filled with NaN bytes
// before each block, so reading it before writing it shows up as NaN.
//
// Thread safety: all state is per OS thread; launches on different OS threads are independent.
#pragma once

#include <string>

namespace simt {

enum class Order { kForward, kReverse };
// The order in which this OS thread resumes the threads of a block (default kForward).
void set_order(Order order);

// The message of this OS thread's last failed launch ("" if none failed since the last call);
// clears it.
std::string take_last_message();
// This OS thread's last launch error (cudaSuccess if none since the last call) and its message;
// clears both (the emulated CUDA runtime's cudaGetLastError reads the emulator's errors this way).
int take_last_error(std::string& message);

}  // namespace simt

// The memory floor for the CPU Adam byte pattern: one pass over the same arrays as the fused
// step (read params, grads, m, v; write params, m, v and, optionally, the 16-bit copy), with
// trivial arithmetic the compiler cannot remove, over the same fixed chunks. Its speed bounds
// what any Adam kernel with this pattern can reach on the machine.
#pragma once

#include <cstdint>

#include "cpu/cpu_adam.h"

namespace strata::bench {

struct FloorBuffers {
  float* params;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grads;
  int grad_bytes;   // 2 or 4
  uint16_t* out16;  // may be null
  int64_t numel;
};

// Runs the floor pass in the caller's task arena; stream: non-temporal stores for out16 (as
// the fused step does when its options ask for it and out16 is 32-byte aligned).
void memory_floor(const FloorBuffers& b, cpu::Isa isa, int64_t chunk_numel, bool stream);

}  // namespace strata::bench

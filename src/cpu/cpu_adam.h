// CPU Adam / AdamW over flat fp32 master parameters and fp32 moments (ZeRO-Offload's host-side
// optimizer). One pass reads the gradient (fp32, fp16 or bf16), applies the per-call gradient
// multiplier, updates params/m/v in place and, optionally, writes the updated params as fp16 or
// bf16 into a separate output buffer (what goes back to the GPU).
//
// Parallelism: work is split into fixed chunks of `chunk_numel` elements and run with oneTBB in
// the calling thread's task arena (use tbb::task_arena to bound the threads). Every element's
// arithmetic is independent of the chunking, and reductions combine per-chunk partial sums in
// chunk order, so results are bit-identical for any thread count or timing.
//
// Thread safety: a CpuAdam is immutable after construction; concurrent step() calls on disjoint
// buffers are safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"

namespace strata::cpu {

// Instruction-set path for the SIMD kernels.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view isa_name(Isa isa);
Isa detect_isa();  // best the CPU supports (AVX-512F, else AVX2+F16C+FMA, else scalar)
// Parses "auto|scalar|avx2|avx512"; auto means detect_isa(). Forcing a path the CPU lacks is an
// error of kind kUnsupported.
Result<Isa> parse_isa(std::string_view name);

enum class AdamMode {
  kAdam,   // weight decay as L2: g += wd * p before the moments
  kAdamW,  // decoupled weight decay: p -= lr * wd * p
};

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  AdamMode mode = AdamMode::kAdamW;
  bool bias_correction = true;
};

// One flat partition of optimizer state. All pointers address `numel` elements.
struct AdamBuffers {
  float* params = nullptr;      // fp32 master weights, updated in place
  float* exp_avg = nullptr;     // Adam m, updated in place
  float* exp_avg_sq = nullptr;  // Adam v, updated in place
  const void* grads = nullptr;  // gradient, of type grad_dtype
  DType grad_dtype = DType::kF32;
  void* out16 = nullptr;           // optional: updated params written as out_dtype
  DType out_dtype = DType::kBF16;  // kF16 or kBF16 (ignored when out16 is null)
  int64_t numel = 0;
};

struct AdamStep {
  int64_t step = 1;         // 1-based step count for bias correction
  float grad_scale = 1.0f;  // multiplier on every gradient (loss-scale unscale x clip coefficient)
};

struct CpuAdamOptions {
  Isa isa = detect_isa();
  int64_t chunk_numel = 1 << 16;  // fixed work unit (a multiple of 64)
};

class CpuAdam {
 public:
  explicit CpuAdam(AdamHyper hyper, CpuAdamOptions options = {});

  const AdamHyper& hyper() const { return hyper_; }
  void set_lr(float lr) { hyper_.lr = lr; }
  Isa isa() const { return options_.isa; }

  // Validates the buffers (non-null where numel > 0, out_dtype 16-bit) and updates them.
  Status step(const AdamBuffers& buffers, const AdamStep& step) const;

 private:
  AdamHyper hyper_;
  CpuAdamOptions options_;
};

// Result of the one-pass gradient check.
struct GradStats {
  double sum_squares = 0.0;    // sum of (scale * g)^2, accumulated per chunk in fp64, chunk order
  bool has_nonfinite = false;  // any NaN or Inf in g
};

// One pass over a gradient buffer: sum of squares (for the global norm) and the NaN/Inf test
// (for fp16 overflow), with the same fixed chunking and determinism as CpuAdam.
GradStats grad_check(const void* grads, DType dtype, int64_t numel, float scale = 1.0f,
                     Isa isa = detect_isa(), int64_t chunk_numel = 1 << 16);

}  // namespace strata::cpu

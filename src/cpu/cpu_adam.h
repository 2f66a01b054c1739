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
// The update, per element, in fp32 (constants computed in double, rounded to float once):
//   g = grad * grad_scale;            Adam: g = fma(wd, p, g)
//   m = fma(b1, m, (1 - b1) * g);     v = fma(b2, v, ((1 - b2) * g) * g)
//   d = fma(sqrt(v), 1 / sqrt(1 - b2^t), eps)      (= sqrt(v / (1 - b2^t)) + eps, PyTorch's form)
//   AdamW: p = p * (1 - lr * wd);     p = fma(-lr / (1 - b1^t), m / d, p)
// Without bias correction the two correction factors are 1. Every ISA path runs exactly these
// operations (one definition, cpu_adam_simd.h), so scalar, AVX2 and AVX-512 give identical bits.
// Gradients are not checked here: a NaN/Inf gradient makes NaN state (use grad_check first).
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

// The per-call constants of one step, computed once in double and rounded to float once: every
// implementation of the update applies exactly these per element (the SIMD paths here, the
// device kernels of gpu::Kernels::adam_step).
struct AdamConstants {
  float grad_scale = 1.0f;       // multiplier on every gradient
  float beta1 = 0.0f;            // b1
  float one_minus_beta1 = 0.0f;  // 1 - b1
  float beta2 = 0.0f;            // b2
  float one_minus_beta2 = 0.0f;  // 1 - b2
  float neg_step_size = 0.0f;    // -lr / (1 - b1^t)     (-lr without bias correction)
  float inv_sqrt_bc2 = 1.0f;     // 1 / sqrt(1 - b2^t)   (1 without bias correction)
  float eps = 0.0f;
  float l2 = 0.0f;        // Adam: weight decay added to the gradient (g += l2 * p); 0 for AdamW
  float decay = 1.0f;     // AdamW: 1 - lr * weight_decay (p *= decay); 1 for Adam
  bool l2_decay = false;  // apply l2 (Adam with weight decay)
  bool decoupled_decay = false;  // apply decay (AdamW with weight decay)
};

// The same step's constants for parameters that take no weight decay (the decay rules of
// model::DecayRule: biases and norm weights).
inline AdamConstants without_decay(AdamConstants k) {
  k.l2_decay = false;
  k.decoupled_decay = false;
  k.l2 = 0.0f;
  k.decay = 1.0f;
  return k;
}

struct CpuAdamOptions {
  Isa isa = detect_isa();
  int64_t chunk_numel = 1 << 16;  // fixed work unit (a multiple of 64)
  // Write out16 with non-temporal stores (when out16 is 32-byte aligned): the 16-bit copy goes
  // to the GPU, not back through this CPU's caches, and streaming skips the read-for-ownership.
  bool stream_out16 = true;
};

class CpuAdam {
 public:
  explicit CpuAdam(AdamHyper hyper, CpuAdamOptions options = {});

  const AdamHyper& hyper() const { return hyper_; }
  void set_lr(float lr) { hyper_.lr = lr; }
  Isa isa() const { return options_.isa; }

  // Validates the buffers (non-null where numel > 0, out_dtype 16-bit), the hyper-parameters,
  // the step and the options (chunk size, ISA supported by this CPU), then updates the buffers.
  // The same as update(buffers, constants(step)).
  Status step(const AdamBuffers& buffers, const AdamStep& step) const;
  // The constants of `step` (validating the hyper-parameters and the step).
  Result<AdamConstants> constants(const AdamStep& step) const;
  // Updates the buffers with given constants (validating the buffers and the options).
  Status update(const AdamBuffers& buffers, const AdamConstants& k) const;

 private:
  AdamHyper hyper_;
  CpuAdamOptions options_;
};

// grad_check's default chunk (Kernels::grad_stats has the same on the device).
inline constexpr int64_t kGradCheckChunk = 1 << 16;

// Result of the one-pass gradient check.
struct GradStats {
  double sum_squares = 0.0;    // sum of (scale * g)^2, accumulated per chunk in fp64, chunk order
  bool has_nonfinite = false;  // any NaN or Inf in g
};

// One pass over a gradient buffer: sum of squares (for the global norm) and the NaN/Inf test
// (for fp16 overflow), with the same fixed chunking and determinism as CpuAdam. Within a chunk,
// g^2 (exact in fp64) is summed into 16 fp64 lanes (element i -> lane i % 16), the lanes are
// added in order, the chunk partials are added in chunk order and the total is multiplied by
// scale^2 in fp64: the bits do not depend on the thread count or the ISA path (an ISA this CPU
// lacks is replaced by detect_isa(), which gives the same bits). has_nonfinite is exact: a sum of
// squares of finite fp32 values cannot overflow fp64. Preconditions (a bug otherwise, checked):
// grads non-null when numel > 0, numel >= 0, chunk_numel a positive multiple of 64.
GradStats grad_check(const void* grads, DType dtype, int64_t numel, float scale = 1.0f,
                     Isa isa = detect_isa(), int64_t chunk_numel = kGradCheckChunk);

// Writes numel fp32 params as fp16/bf16 (round to nearest even) with the SIMD paths and fixed
// chunks of `options` (the separate copy-out pass of a two-pass optimizer step).
Status cast_params_16(const float* params, void* out16, DType out_dtype, int64_t numel,
                      const CpuAdamOptions& options = {});

}  // namespace strata::cpu

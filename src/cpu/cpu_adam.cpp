// CpuAdam::step, grad_check and cast_params_16: validation, per-call constants, ISA dispatch and
// the oneTBB loop over fixed chunks (cpu_adam.h).
#include "cpu/cpu_adam.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "cpu/cpu_adam_kernels.h"

namespace strata::cpu {
namespace {

using detail::OutKind;

bool valid_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

Status check_options(const CpuAdamOptions& options) {
  if (options.chunk_numel <= 0 || options.chunk_numel % 64 != 0) {
    return make_error(ErrorCode::kConfig, "CPU Adam chunk_numel ", options.chunk_numel,
                      " is not accepted (use a positive multiple of 64)");
  }
  if (static_cast<int>(options.isa) < 0 || static_cast<int>(options.isa) > 2) {
    return make_error(ErrorCode::kConfig, "CPU Adam ISA ", static_cast<int>(options.isa),
                      " is not accepted (use scalar, avx2 or avx512)");
  }
  if (static_cast<int>(options.isa) > static_cast<int>(detect_isa())) {
    return make_error(ErrorCode::kUnsupported, "CPU Adam ISA ", isa_name(options.isa),
                      " is not supported by this CPU (best: ", isa_name(detect_isa()), ")");
  }
  return ok_status();
}

Status check_hyper(const AdamHyper& h) {
  if (!std::isfinite(h.lr) || h.lr < 0.0f) {
    return make_error(ErrorCode::kConfig, "Adam lr ", h.lr, " is not accepted (use lr >= 0)");
  }
  if (!(h.beta1 >= 0.0f && h.beta1 < 1.0f) || !(h.beta2 >= 0.0f && h.beta2 < 1.0f)) {
    return make_error(ErrorCode::kConfig, "Adam betas (", h.beta1, ", ", h.beta2,
                      ") are not accepted (use 0 <= beta < 1)");
  }
  if (!(h.eps > 0.0f) || !std::isfinite(h.eps)) {
    return make_error(ErrorCode::kConfig, "Adam eps ", h.eps, " is not accepted (use eps > 0)");
  }
  if (!std::isfinite(h.weight_decay) || h.weight_decay < 0.0f) {
    return make_error(ErrorCode::kConfig, "Adam weight_decay ", h.weight_decay,
                      " is not accepted (use weight_decay >= 0)");
  }
  if (h.mode != AdamMode::kAdam && h.mode != AdamMode::kAdamW) {
    return make_error(ErrorCode::kConfig, "Adam mode ", static_cast<int>(h.mode),
                      " is not accepted (use kAdam or kAdamW)");
  }
  return ok_status();
}

Status check_buffers(const AdamBuffers& b) {
  if (b.numel < 0) {
    return make_error(ErrorCode::kConfig, "Adam numel ", b.numel, " is not accepted (use >= 0)");
  }
  if (!valid_dtype(b.grad_dtype)) {
    return make_error(ErrorCode::kConfig, "Adam grad dtype ", static_cast<int>(b.grad_dtype),
                      " is not accepted (use f32, f16 or bf16)");
  }
  if (b.out16 != nullptr && b.out_dtype != DType::kF16 && b.out_dtype != DType::kBF16) {
    return make_error(ErrorCode::kConfig, "Adam out_dtype ", dtype_name(b.out_dtype),
                      " is not accepted for out16 (use f16 or bf16)");
  }
  if (b.numel > 0 && (b.params == nullptr || b.exp_avg == nullptr || b.exp_avg_sq == nullptr ||
                      b.grads == nullptr)) {
    return make_error(ErrorCode::kConfig, "Adam buffers of ", b.numel,
                      " elements have a null params, exp_avg, exp_avg_sq or grads pointer");
  }
  return ok_status();
}

detail::AdamChunkFn adam_kernel(Isa isa, DType grad, OutKind out, bool l2, bool decoupled) {
  switch (isa) {
    case Isa::kAvx512: return detail::adam_kernel_avx512(grad, out, l2, decoupled);
    case Isa::kAvx2: return detail::adam_kernel_avx2(grad, out, l2, decoupled);
    case Isa::kScalar: break;
  }
  return detail::adam_kernel_scalar(grad, out, l2, decoupled);
}

detail::SumSquaresFn sum_squares_kernel(Isa isa, DType grad) {
  switch (isa) {
    case Isa::kAvx512: return detail::sum_squares_kernel_avx512(grad);
    case Isa::kAvx2: return detail::sum_squares_kernel_avx2(grad);
    case Isa::kScalar: break;
  }
  return detail::sum_squares_kernel_scalar(grad);
}

detail::Cast16Fn cast16_kernel(Isa isa, OutKind out) {
  switch (isa) {
    case Isa::kAvx512: return detail::cast16_kernel_avx512(out);
    case Isa::kAvx2: return detail::cast16_kernel_avx2(out);
    case Isa::kScalar: break;
  }
  return detail::cast16_kernel_scalar(out);
}

OutKind out_kind(const void* out16, DType t) {
  if (out16 == nullptr) return OutKind::kNone;
  return t == DType::kF16 ? OutKind::kF16 : OutKind::kBF16;
}

// Runs body(chunk_index, begin, count) over fixed chunks; each chunk is one task unit, so the
// split never depends on the number of threads.
template <class Body>
void for_each_chunk(int64_t numel, int64_t chunk_numel, const Body& body) {
  const int64_t num_chunks = (numel + chunk_numel - 1) / chunk_numel;
  auto run = [&](int64_t c) {
    const int64_t begin = c * chunk_numel;
    body(c, begin, std::min(chunk_numel, numel - begin));
  };
  if (num_chunks == 1) {
    run(0);
    return;
  }
  tbb::parallel_for(
      tbb::blocked_range<int64_t>(0, num_chunks, 1),
      [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t c = r.begin(); c != r.end(); ++c) run(c);
      },
      tbb::simple_partitioner());
}

// Non-temporal 16-bit stores need each vector store aligned to its width (at most 32 bytes);
// chunks start at multiples of 64 elements (128 bytes), so the base alignment decides.
bool can_stream(const void* out16) { return reinterpret_cast<uintptr_t>(out16) % 32 == 0; }

}  // namespace

CpuAdam::CpuAdam(AdamHyper hyper, CpuAdamOptions options) : hyper_(hyper), options_(options) {}

Result<AdamConstants> CpuAdam::constants(const AdamStep& step) const {
  STRATA_RETURN_IF_ERROR(check_hyper(hyper_));
  if (hyper_.bias_correction && step.step < 1) {
    return make_error(ErrorCode::kConfig, "Adam step ", step.step,
                      " is not accepted with bias correction (use step >= 1)");
  }
  if (!std::isfinite(step.grad_scale)) {
    return make_error(ErrorCode::kConfig, "Adam grad_scale ", step.grad_scale,
                      " is not accepted (use a finite value)");
  }
  const AdamHyper& h = hyper_;
  const double b1 = h.beta1;
  const double b2 = h.beta2;
  double bc1 = 1.0;
  double bc2 = 1.0;
  if (h.bias_correction) {
    bc1 = 1.0 - std::pow(b1, static_cast<double>(step.step));
    bc2 = 1.0 - std::pow(b2, static_cast<double>(step.step));
  }
  AdamConstants k;
  k.l2_decay = h.mode == AdamMode::kAdam && h.weight_decay != 0.0f;
  k.decoupled_decay = h.mode == AdamMode::kAdamW && h.weight_decay != 0.0f;
  k.grad_scale = step.grad_scale;
  k.beta1 = h.beta1;
  k.one_minus_beta1 = static_cast<float>(1.0 - b1);
  k.beta2 = h.beta2;
  k.one_minus_beta2 = static_cast<float>(1.0 - b2);
  k.neg_step_size = static_cast<float>(-static_cast<double>(h.lr) / bc1);
  k.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  k.eps = h.eps;
  k.l2 = k.l2_decay ? h.weight_decay : 0.0f;
  k.decay = k.decoupled_decay ? static_cast<float>(1.0 - static_cast<double>(h.lr) * h.weight_decay)
                              : 1.0f;
  return k;
}

Status CpuAdam::step(const AdamBuffers& buffers, const AdamStep& step) const {
  STRATA_ASSIGN_OR_RETURN(const AdamConstants k, constants(step));
  return update(buffers, k);
}

Status CpuAdam::update(const AdamBuffers& buffers, const AdamConstants& k) const {
  STRATA_RETURN_IF_ERROR(check_options(options_));
  STRATA_RETURN_IF_ERROR(check_buffers(buffers));
  if (buffers.numel == 0) return ok_status();
  const bool l2 = k.l2_decay;
  const bool decoupled = k.decoupled_decay;
  const OutKind out = out_kind(buffers.out16, buffers.out_dtype);
  const detail::AdamChunkFn fn = adam_kernel(options_.isa, buffers.grad_dtype, out, l2, decoupled);
  STRATA_CHECK(fn != nullptr);
  const bool stream = options_.stream_out16 && out != OutKind::kNone && can_stream(buffers.out16);
  const size_t gsize = dtype_size(buffers.grad_dtype);
  const auto* g = static_cast<const unsigned char*>(buffers.grads);
  auto* o = static_cast<uint16_t*>(buffers.out16);
  for_each_chunk(buffers.numel, options_.chunk_numel, [&](int64_t, int64_t begin, int64_t n) {
    fn(k, buffers.params + begin, buffers.exp_avg + begin, buffers.exp_avg_sq + begin,
       g + begin * gsize, o == nullptr ? nullptr : o + begin, n, stream);
  });
  return ok_status();
}

GradStats grad_check(const void* grads, DType dtype, int64_t numel, float scale, Isa isa,
                     int64_t chunk_numel) {
  STRATA_CHECK(numel >= 0, "grad_check numel " << numel);
  STRATA_CHECK(chunk_numel > 0 && chunk_numel % 64 == 0, "grad_check chunk_numel " << chunk_numel);
  STRATA_CHECK(valid_dtype(dtype));
  STRATA_CHECK(numel == 0 || grads != nullptr);
  GradStats stats;
  if (numel == 0) return stats;
  if (static_cast<int>(isa) > static_cast<int>(detect_isa()) || static_cast<int>(isa) < 0) {
    isa = detect_isa();
  }
  const detail::SumSquaresFn fn = sum_squares_kernel(isa, dtype);
  STRATA_CHECK(fn != nullptr);
  const int64_t num_chunks = (numel + chunk_numel - 1) / chunk_numel;
  std::vector<double> partial(static_cast<size_t>(num_chunks));
  const size_t gsize = dtype_size(dtype);
  const auto* g = static_cast<const unsigned char*>(grads);
  for_each_chunk(numel, chunk_numel, [&](int64_t c, int64_t begin, int64_t n) {
    partial[static_cast<size_t>(c)] = fn(g + begin * gsize, n);
  });
  double sum = 0.0;
  for (double x : partial) sum += x;
  stats.has_nonfinite = !std::isfinite(sum);
  const double s = scale;
  stats.sum_squares = sum * (s * s);
  return stats;
}

Status cast_params_16(const float* params, void* out16, DType out_dtype, int64_t numel,
                      const CpuAdamOptions& options) {
  STRATA_RETURN_IF_ERROR(check_options(options));
  if (out_dtype != DType::kF16 && out_dtype != DType::kBF16) {
    return make_error(ErrorCode::kConfig, "cast_params_16 out_dtype ", dtype_name(out_dtype),
                      " is not accepted (use f16 or bf16)");
  }
  if (numel < 0 || (numel > 0 && (params == nullptr || out16 == nullptr))) {
    return make_error(ErrorCode::kConfig, "cast_params_16 of ", numel,
                      " elements: numel must be >= 0 and the pointers non-null");
  }
  if (numel == 0) return ok_status();
  const detail::Cast16Fn fn = cast16_kernel(options.isa, out_kind(out16, out_dtype));
  STRATA_CHECK(fn != nullptr);
  const bool stream = options.stream_out16 && can_stream(out16);
  auto* o = static_cast<uint16_t*>(out16);
  for_each_chunk(numel, options.chunk_numel, [&](int64_t, int64_t begin, int64_t n) {
    fn(params + begin, o + begin, n, stream);
  });
  return ok_status();
}

}  // namespace strata::cpu

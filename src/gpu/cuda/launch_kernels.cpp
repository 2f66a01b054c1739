// LaunchKernels: argument checks and launches of every op except matmul (launch_kernels.h).
#include "gpu/cuda/launch_kernels.h"

#include <algorithm>
#include <climits>
#include <initializer_list>

#include "gpu/cuda/cuda_status.h"

namespace strata::gpu::cuda {
namespace {

constexpr int64_t kMaxGridX = INT32_MAX;
constexpr int64_t kMaxGridYZ = 65535;

Status dtype_error(const char* op, DType t) {
  return make_error(ErrorCode::kConfig, op, ": dtype ", static_cast<int>(t),
                    " is not accepted (f32, f16 or bf16)");
}

// kConfig naming `op` and the first null pointer among `ptrs`.
Status check_pointers(const char* op, std::initializer_list<const void*> ptrs) {
  int index = 0;
  for (const void* p : ptrs) {
    if (p == nullptr) {
      return make_error(ErrorCode::kConfig, op, ": pointer argument ", index, " is null");
    }
    ++index;
  }
  return ok_status();
}

Status check_count(const char* op, const char* name, int64_t value, int64_t min_value,
                   int64_t max_value = INT64_MAX) {
  if (value < min_value || value > max_value) {
    return make_error(ErrorCode::kConfig, op, ": ", name, " = ", value,
                      " is not accepted (must be in [", min_value, ", ", max_value, "])");
  }
  return ok_status();
}

Status launched(cudaError_t err, const char* op) { return cuda_status(err, op); }

// The checks of an op from src of one dtype to dst of another (cast, accumulate): both dtypes,
// n >= 0 and, when n > 0, both pointers.
Status check_conversion(const char* op, const void* dst, DType dst_dtype, const void* src,
                        DType src_dtype, int64_t n) {
  if (!valid_dtype(dst_dtype)) return dtype_error(op, dst_dtype);
  if (!valid_dtype(src_dtype)) return dtype_error(op, src_dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "n", n, 0));
  return n == 0 ? ok_status() : check_pointers(op, {dst, src});
}

}  // namespace

Status LaunchKernels::check_matmul(const MatmulArgs& args) {
  if (!valid_dtype(args.dtype_ab) || !valid_dtype(args.dtype_c)) {
    return make_error(ErrorCode::kConfig, "matmul: dtypes ", static_cast<int>(args.dtype_ab), "/",
                      static_cast<int>(args.dtype_c), " are not accepted (f32, f16 or bf16)");
  }
  if (args.dtype_c != args.dtype_ab && args.dtype_c != DType::kF32) {
    return make_error(ErrorCode::kUnsupported, "matmul: C dtype ", dtype_name(args.dtype_c),
                      " with A/B dtype ", dtype_name(args.dtype_ab),
                      " is not supported on CUDA (C must be f32 or the A/B dtype)");
  }
  if (args.m <= 0 || args.n <= 0 || args.k <= 0) {  // as on the CpuDevice
    return make_error(ErrorCode::kConfig, "matmul: M=", args.m, " N=", args.n, " K=", args.k,
                      " are not accepted (each must be > 0)");
  }
  if (args.a == nullptr || args.b == nullptr || args.c == nullptr) {
    return make_error(ErrorCode::kConfig, "matmul: A, B and C must be non-null");
  }
  return check_epilogue(args);
}

bool LaunchKernels::epilogue_fuses(const MatmulArgs& args) {
  return args.epilogue == Epilogue::kNone || args.n % kEpilogueAuxLdMultiple == 0;
}

Status LaunchKernels::bias_backward(Stream& s, void* dbias, const void* dout, int64_t m, int64_t n,
                                    DType dtype, bool accumulate) {
  const char* op = "bias_backward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "m", m, 0));
  STRATA_RETURN_IF_ERROR(check_count(op, "n", n, 0, kMaxGridX * 32));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {dbias, m > 0 ? dout : dbias}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_bias_backward(target.stream, dbias, dout, m, n, elem_type(dtype),
                                       accumulate, target.scratch),
                  op);
}

Status LaunchKernels::embedding_forward(Stream& s, void* out, const int32_t* tokens,
                                        const void* wte, const void* wpe, int64_t B, int64_t T,
                                        int64_t C, DType dtype) {
  const char* op = "embedding_forward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "B", B, 0));
  STRATA_RETURN_IF_ERROR(check_count(op, "T", T, 0));
  STRATA_RETURN_IF_ERROR(check_count(op, "C", C, 0));
  if (B * T * C == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, tokens, wte, wpe}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(
      launch_embedding_forward(target.stream, out, tokens, wte, wpe, B, T, C, elem_type(dtype)),
      op);
}

Status LaunchKernels::embedding_backward(Stream& s, void* dwte, void* dwpe, const void* dout,
                                         const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                         DType dtype) {
  const char* op = "embedding_backward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "B", B, 0));
  STRATA_RETURN_IF_ERROR(check_count(op, "T", T, 0, kMaxGridX));
  // One block per position; the sorted positions' keys fit the stream's scratch.
  STRATA_RETURN_IF_ERROR(
      check_count(op, "B*T", B * T, 0, std::min<int64_t>(kMaxGridX, kMaxEmbeddingPositions)));
  STRATA_RETURN_IF_ERROR(check_count(op, "C", C, 0));
  if (B * T * C == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {dwte, dwpe, dout, tokens}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_embedding_backward(target.stream, dwte, dwpe, dout, tokens, B, T, C,
                                            elem_type(dtype), target.scratch),
                  op);
}

Status LaunchKernels::layernorm_forward(Stream& s, void* out, float* mean, float* rstd,
                                        const void* inp, const void* weight, const void* bias,
                                        int64_t N, int64_t C, float eps, DType dtype) {
  const char* op = "layernorm_forward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "N", N, 0, kMaxGridX));
  STRATA_RETURN_IF_ERROR(check_count(op, "C", C, 1));
  if (N == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, mean, rstd, inp, weight, bias}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_layernorm_forward(target.stream, out, mean, rstd, nullptr, inp, nullptr,
                                           weight, bias, N, C, eps, elem_type(dtype)),
                  op);
}

Status LaunchKernels::residual_layernorm_forward(Stream& s, void* residual, void* out, float* mean,
                                                 float* rstd, const void* a, const void* b,
                                                 const void* weight, const void* bias, int64_t N,
                                                 int64_t C, float eps, DType dtype) {
  const char* op = "residual_layernorm_forward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "N", N, 0, kMaxGridX));
  STRATA_RETURN_IF_ERROR(check_count(op, "C", C, 1));
  if (N == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {residual, out, mean, rstd, a, b, weight, bias}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_layernorm_forward(target.stream, out, mean, rstd, residual, a, b, weight,
                                           bias, N, C, eps, elem_type(dtype)),
                  op);
}

Status LaunchKernels::layernorm_backward(Stream& s, void* dinp, void* dweight, void* dbias,
                                         const void* dout, const void* inp, const void* weight,
                                         const float* mean, const float* rstd, int64_t N, int64_t C,
                                         DType dtype) {
  const char* op = "layernorm_backward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "N", N, 0, kMaxGridX));
  // The parameter gradients' partial sums: one chunk of 2C floats at least in the scratch.
  STRATA_RETURN_IF_ERROR(check_count(op, "C", C, 1, kStreamScratchFloats / 2));
  if (N == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {dinp, dweight, dbias, dout, inp, weight, mean, rstd}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_layernorm_backward(target.stream, dinp, dweight, dbias, dout, inp, weight,
                                            mean, rstd, N, C, elem_type(dtype), target.scratch),
                  op);
}

Status LaunchKernels::rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp,
                                      const void* weight, int64_t N, int64_t C, float eps,
                                      DType dtype) {
  const char* op = "rmsnorm_forward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "N", N, 0, kMaxGridX));
  STRATA_RETURN_IF_ERROR(check_count(op, "C", C, 1));
  if (N == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, rstd, inp, weight}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(
      launch_rmsnorm_forward(target.stream, out, rstd, inp, weight, N, C, eps, elem_type(dtype)),
      op);
}

Status LaunchKernels::rmsnorm_backward(Stream& s, void* dinp, void* dweight, const void* dout,
                                       const void* inp, const void* weight, const float* rstd,
                                       int64_t N, int64_t C, DType dtype) {
  const char* op = "rmsnorm_backward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "N", N, 0, kMaxGridX));
  // The weight gradient's partial sums: one chunk of 2C floats at least in the scratch.
  STRATA_RETURN_IF_ERROR(check_count(op, "C", C, 1, kStreamScratchFloats / 2));
  if (N == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {dinp, dweight, dout, inp, weight, rstd}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_rmsnorm_backward(target.stream, dinp, dweight, dout, inp, weight, rstd, N,
                                          C, elem_type(dtype), target.scratch),
                  op);
}

Status LaunchKernels::rope(Stream& s, void* x, const float* inv_freq, int64_t B, int64_t T,
                           int64_t heads, int64_t HS, int64_t stride, bool inverse, DType dtype) {
  const char* op = "rope";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "B", B, 0));
  STRATA_RETURN_IF_ERROR(check_count(op, "T", T, 0));
  STRATA_RETURN_IF_ERROR(check_count(op, "heads", heads, 1));
  STRATA_RETURN_IF_ERROR(check_count(op, "HS", HS, 2));
  if (HS % 2 != 0) return make_error(ErrorCode::kConfig, op, ": HS = ", HS, " is odd");
  if (stride < heads * HS) {
    return make_error(ErrorCode::kConfig, op, ": stride ", stride, " < heads * HS = ", heads * HS);
  }
  if (B == 0 || T == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {x, inv_freq}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(
      launch_rope(target.stream, x, inv_freq, B, T, heads, HS, stride, inverse, elem_type(dtype)),
      op);
}

Status LaunchKernels::swiglu_forward(Stream& s, void* out, const void* gate_up, int64_t N,
                                     int64_t H, DType dtype) {
  const char* op = "swiglu_forward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "N", N, 0));
  STRATA_RETURN_IF_ERROR(check_count(op, "H", H, 1));
  if (N == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, gate_up}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_swiglu_forward(target.stream, out, gate_up, N, H, elem_type(dtype)), op);
}

Status LaunchKernels::swiglu_backward(Stream& s, void* dgate_up, const void* gate_up,
                                      const void* dout, int64_t N, int64_t H, DType dtype) {
  const char* op = "swiglu_backward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "N", N, 0));
  STRATA_RETURN_IF_ERROR(check_count(op, "H", H, 1));
  if (N == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {dgate_up, gate_up, dout}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(
      launch_swiglu_backward(target.stream, dgate_up, gate_up, dout, N, H, elem_type(dtype)), op);
}

Status LaunchKernels::gelu_forward(Stream& s, void* out, const void* inp, int64_t n, DType dtype) {
  const char* op = "gelu_forward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "n", n, 0));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, inp}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_gelu_forward(target.stream, out, inp, n, elem_type(dtype)), op);
}

Status LaunchKernels::gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout,
                                    int64_t n, DType dtype) {
  const char* op = "gelu_backward";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "n", n, 0));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {dinp, inp, dout}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_gelu_backward(target.stream, dinp, inp, dout, n, elem_type(dtype)), op);
}

namespace {

Status check_attention(const char* op, DType dtype, int64_t B, int64_t T, int64_t C, int64_t NH,
                       int64_t NKV) {
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "B", B, 0, kMaxGridYZ));
  STRATA_RETURN_IF_ERROR(check_count(op, "T", T, 0, INT32_MAX / 2));
  STRATA_RETURN_IF_ERROR(check_count(op, "NH", NH, 1, kMaxGridYZ));
  STRATA_RETURN_IF_ERROR(check_count(op, "NKV", NKV, 1, NH));
  STRATA_RETURN_IF_ERROR(check_count(op, "C", C, 1, INT32_MAX / 3));
  if (C % NH != 0) {
    return make_error(ErrorCode::kConfig, op, ": C = ", C, " is not a multiple of NH = ", NH);
  }
  if (NH % NKV != 0) {
    return make_error(ErrorCode::kConfig, op, ": NH = ", NH, " is not a multiple of NKV = ", NKV);
  }
  if (C / NH > kMaxHeadSize) {
    return make_error(ErrorCode::kUnsupported, op, ": head size C/NH = ", C / NH,
                      " is above the CUDA kernel's maximum of ", kMaxHeadSize);
  }
  return ok_status();
}

}  // namespace

Status LaunchKernels::attention_forward(Stream& s, void* out, float* lse, const void* qkv,
                                        int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                        DType dtype) {
  const char* op = "attention_forward";
  STRATA_RETURN_IF_ERROR(check_attention(op, dtype, B, T, C, NH, NKV));
  if (B * T == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, lse, qkv}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(
      launch_attention_forward(target.stream, out, lse, qkv, B, T, C, NH, NKV, elem_type(dtype)),
      op);
}

Status LaunchKernels::attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                                         const void* out, const float* lse, int64_t B, int64_t T,
                                         int64_t C, int64_t NH, int64_t NKV, DType dtype) {
  const char* op = "attention_backward";
  STRATA_RETURN_IF_ERROR(check_attention(op, dtype, B, T, C, NH, NKV));
  if (B * T == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {dqkv, dout, qkv, out, lse}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_attention_backward(target.stream, dqkv, dout, qkv, out, lse, B, T, C, NH,
                                            NKV, elem_type(dtype), target.scratch),
                  op);
}

Status LaunchKernels::add(Stream& s, void* out, const void* a, const void* b, int64_t n,
                          DType dtype) {
  const char* op = "add";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "n", n, 0));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, a, b}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_add(target.stream, out, a, b, n, elem_type(dtype)), op);
}

Status LaunchKernels::adam_step(Stream& s, const AdamArgs& a) {
  const char* op = "adam_step";
  if (!valid_dtype(a.grad_dtype)) return dtype_error(op, a.grad_dtype);
  if (a.out16 != nullptr && a.out_dtype == DType::kF32) {
    return make_error(ErrorCode::kConfig, op, ": out16 must be fp16 or bf16, not fp32");
  }
  STRATA_RETURN_IF_ERROR(check_count(op, "numel", a.numel, 0));
  if (a.numel == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {a.params, a.exp_avg, a.exp_avg_sq, a.grads}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  const cpu::AdamConstants& c = a.constants;
  const AdamKernelConstants k{c.grad_scale,
                              c.beta1,
                              c.one_minus_beta1,
                              c.beta2,
                              c.one_minus_beta2,
                              c.neg_step_size,
                              c.inv_sqrt_bc2,
                              c.eps,
                              c.l2,
                              c.decay,
                              c.l2_decay,
                              c.decoupled_decay};
  return launched(launch_adam(target.stream, a.params, a.exp_avg, a.exp_avg_sq, a.grads,
                              elem_type(a.grad_dtype), a.out16, elem_type(a.out_dtype),
                              a.out16 != nullptr, a.numel, k),
                  op);
}

Status LaunchKernels::scale(Stream& s, void* x, float factor, int64_t n, DType dtype) {
  const char* op = "scale";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "n", n, 0));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {x}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_scale(target.stream, x, factor, n, elem_type(dtype)), op);
}

Status LaunchKernels::cast(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
                           int64_t n) {
  const char* op = "cast";
  STRATA_RETURN_IF_ERROR(check_conversion(op, dst, dst_dtype, src, src_dtype, n));
  if (n == 0) return ok_status();
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(
      launch_cast(target.stream, dst, elem_type(dst_dtype), src, elem_type(src_dtype), n), op);
}

Status LaunchKernels::accumulate(Stream& s, void* dst, DType dst_dtype, const void* src,
                                 DType src_dtype, int64_t n) {
  const char* op = "accumulate";
  STRATA_RETURN_IF_ERROR(check_conversion(op, dst, dst_dtype, src, src_dtype, n));
  if (n == 0) return ok_status();
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(
      launch_accumulate(target.stream, dst, elem_type(dst_dtype), src, elem_type(src_dtype), n),
      op);
}

Status LaunchKernels::softmax_cross_entropy(Stream& s, float* losses, void* logits,
                                            const int32_t* targets, int64_t N, int64_t V,
                                            int64_t Vp, float dloss, DType dtype) {
  const char* op = "softmax_cross_entropy";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "N", N, 0, kMaxGridX));
  STRATA_RETURN_IF_ERROR(check_count(op, "V", V, 1, INT32_MAX));
  STRATA_RETURN_IF_ERROR(check_count(op, "Vp", Vp, V));
  if (N == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_pointers(op, {losses, logits, targets}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_softmax_cross_entropy(target.stream, losses, logits, targets, N, V, Vp,
                                               dloss, elem_type(dtype)),
                  op);
}

Status LaunchKernels::sum_squares(Stream& s, float* out, const void* x, int64_t n, DType dtype,
                                  bool accumulate) {
  const char* op = "sum_squares";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "n", n, 0));
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, n > 0 ? x : out}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(
      launch_sum_squares(target.stream, out, x, n, elem_type(dtype), accumulate, target.scratch),
      op);
}

Status LaunchKernels::grad_stats(Stream& s, double* out, const void* x, int64_t n, DType dtype) {
  static_assert(kGradCheckChunk == cpu::kGradCheckChunk, "grad_stats chunks as grad_check's");
  const char* op = "grad_stats";
  if (!valid_dtype(dtype)) return dtype_error(op, dtype);
  STRATA_RETURN_IF_ERROR(check_count(op, "n", n, 0, kGradStatsMaxElements));
  STRATA_RETURN_IF_ERROR(check_pointers(op, {out, n > 0 ? x : out}));
  STRATA_ASSIGN_OR_RETURN(const LaunchTarget target, prepare(s));
  return launched(launch_grad_stats(target.stream, out, x, n, elem_type(dtype), target.scratch),
                  op);
}

}  // namespace strata::gpu::cuda

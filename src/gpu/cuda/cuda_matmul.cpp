// CudaKernels::matmul on cuBLASLt, the CudaKernels lifetime (the cuBLASLt handle) and its stream
// preparation.
//
// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] is, read as column-major, C^T[N,M] = op(B)^T op(A)^T,
// so cuBLASLt gets B as its first operand and A as its second, with the same transpose flags:
//   first  operand (B): stored [K,N] row-major = [N x K] col-major, ld N (no transpose), or
//                       stored [N,K] row-major = [K x N] col-major, ld K (transpose);
//   second operand (A): stored [M,K] row-major = [K x M] col-major, ld K (no transpose), or
//                       stored [K,M] row-major = [M x K] col-major, ld M (transpose);
//   result C:           [N x M] col-major, ld N.
// Compute type fp32 (CUBLAS_COMPUTE_32F, no TF32), scale type fp32. A bias is added by a
// separate kernel after the matmul (launch_add_bias_rows).
#include <algorithm>
#include <cstdint>

#include "gpu/cuda/cublas_status.h"
#include "gpu/cuda/cuda_device.h"
#include "gpu/cuda/cuda_kernels.h"
#include "gpu/cuda/cuda_status.h"

namespace strata::gpu::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// Largest power of two (at most 256) dividing the address.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

// RAII owners of the cuBLASLt descriptors of one call.
struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { (void)cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { (void)cublasLtMatrixLayoutDestroy(d); }
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const {
    (void)cublasLtMatmulPreferenceDestroy(d);
  }
};
using OpDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter>;

Result<Layout> make_layout(DType t, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(
      &layout, cuda_type(t), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), rows));
  return Layout(layout);
}

}  // namespace

Result<std::unique_ptr<CudaKernels>> CudaKernels::create(const CudaDevice* device) {
  STRATA_RETURN_IF_ERROR(device->activate());
  cublasLtHandle_t handle = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  return std::unique_ptr<CudaKernels>(new CudaKernels(device, handle));
}

Result<CudaStream*> CudaKernels::cuda_stream(Stream& s) const {
  auto* stream = dynamic_cast<CudaStream*>(&s);
  if (stream == nullptr || stream->device() != device_) {
    return make_error(ErrorCode::kConfig,
                      "CUDA kernels need a stream created by the same CUDA device");
  }
  STRATA_RETURN_IF_ERROR(device_->activate());
  return stream;
}

Result<LaunchKernels::LaunchTarget> CudaKernels::prepare(Stream& s) const {
  STRATA_ASSIGN_OR_RETURN(CudaStream * cs, cuda_stream(s));
  return LaunchTarget{cs->handle(), cs->scratch()};
}

CudaKernels::~CudaKernels() {
  (void)device_->activate();
  (void)cublasLtDestroy(handle_);
}

Result<cublasLtMatmulAlgo_t> CudaKernels::find_algo(const MatmulKey& key, cublasLtMatmulDesc_t op,
                                                    cublasLtMatrixLayout_t a,
                                                    cublasLtMatrixLayout_t b,
                                                    cublasLtMatrixLayout_t c,
                                                    size_t workspace_bytes, uint32_t align_bytes) {
  std::lock_guard<std::mutex> lock(algo_mu_);
  auto found = algos_.find(key);
  if (found != algos_.end()) return found->second;
  cublasLtMatmulPreference_t pref_raw = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref_raw));
  Preference pref(pref_raw);
  const uint64_t ws = workspace_bytes;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  // kernels.h's contract is fp32 accumulation: a split-K algorithm may only reduce its partial
  // sums in the compute type (fp32, in the workspace), never in place in the 16-bit output or
  // in the output type (NONE, one sequence, is always allowed).
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)));
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    STRATA_CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulPreferenceSetAttribute(pref.get(), attr, &align_bytes, sizeof(align_bytes)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  STRATA_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmulAlgoGetHeuristic(handle_, op, a, b, c, c, pref.get(), 1, &result, &count));
  if (count == 0) {
    return make_error(ErrorCode::kUnsupported,
                      "matmul: cuBLASLt has no algorithm for M=", std::get<0>(key),
                      " N=", std::get<1>(key), " K=", std::get<2>(key));
  }
  algos_.emplace(key, result.algo);
  return result.algo;
}

Status CudaKernels::matmul(Stream& s, const MatmulArgs& args) {
  STRATA_RETURN_IF_ERROR(check_matmul(args));
  STRATA_ASSIGN_OR_RETURN(CudaStream * cs, cuda_stream(s));
  const int64_t m = args.m, n = args.n, k = args.k;
  cublasLtMatmulDesc_t op_raw = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&op_raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  OpDesc desc(op_raw);
  const cublasOperation_t trans_first = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_second = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &trans_first, sizeof(trans_first)));
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &trans_second, sizeof(trans_second)));
  STRATA_ASSIGN_OR_RETURN(Layout first,
                          make_layout(args.dtype_ab, args.trans_b ? k : n, args.trans_b ? n : k));
  STRATA_ASSIGN_OR_RETURN(Layout second,
                          make_layout(args.dtype_ab, args.trans_a ? m : k, args.trans_a ? k : m));
  STRATA_ASSIGN_OR_RETURN(Layout result, make_layout(args.dtype_c, n, m));
  const uint32_t align =
      std::min({alignment_of(args.a), alignment_of(args.b), alignment_of(args.c)});
  const MatmulKey key{m,
                      n,
                      k,
                      args.trans_a,
                      args.trans_b,
                      static_cast<int>(args.dtype_ab),
                      static_cast<int>(args.dtype_c),
                      static_cast<int>(align)};
  STRATA_ASSIGN_OR_RETURN(cublasLtMatmulAlgo_t algo,
                          find_algo(key, desc.get(), first.get(), second.get(), result.get(),
                                    cs->workspace_bytes(), align));
  STRATA_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmul(handle_, desc.get(), &args.alpha, args.b, first.get(), args.a, second.get(),
                     &args.beta, args.c, result.get(), args.c, result.get(), &algo, cs->workspace(),
                     cs->workspace_bytes(), cs->handle()));
  if (args.bias != nullptr) {
    STRATA_RETURN_IF_ERROR(cuda_status(
        launch_add_bias_rows(cs->handle(), args.c, args.bias, m, n, elem_type(args.dtype_c)),
        "matmul bias"));
  }
  return ok_status();
}

}  // namespace strata::gpu::cuda

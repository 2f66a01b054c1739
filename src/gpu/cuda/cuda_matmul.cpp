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
// Compute type fp32 (CUBLAS_COMPUTE_32F, no TF32), scale type fp32. The bias and the GELU
// epilogues are cuBLASLt's (BIAS, GELU_AUX_BIAS / GELU_AUX, DGELU): the bias vector has one
// element a row of the column-major result (our N), aux is [N x M] column-major with ld N (which
// cuBLASLt wants a multiple of 8; otherwise, or when cuBLASLt has no algorithm with the epilogue,
// the epilogue runs as its own kernels). Descriptors, layouts and the algorithm are made once per
// stream, shape, alignment and epilogue and kept (plan()); a call sets the bias and aux pointers
// and enqueues.
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

// cuBLASLt's epilogue for the matmul's epilogue and bias.
uint32_t lt_epilogue(const MatmulArgs& args) {
  switch (args.epilogue) {
    case Epilogue::kGelu:
      return args.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::kGeluBackward: return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::kNone: break;
  }
  return args.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

Result<LtLayout> make_layout(DType t, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(
      &layout, cuda_type(t), static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), rows));
  return LtLayout(layout);
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

Result<CudaKernels::Plan*> CudaKernels::plan(const PlanKey& key, const MatmulArgs& args,
                                             uint32_t epilogue, uint32_t align, CudaStream* cs) {
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second.get();
  auto p = std::make_unique<Plan>();
  const int64_t m = args.m, n = args.n, k = args.k;
  cublasLtMatmulDesc_t op_raw = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&op_raw, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  p->desc.reset(op_raw);
  const cublasOperation_t trans_first = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_second = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      p->desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &trans_first, sizeof(trans_first)));
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      p->desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &trans_second, sizeof(trans_second)));
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      p->desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (args.aux != nullptr) {
    const int64_t aux_ld = n;  // aux is row-major [M,N]: column-major [N x M], ld N
    STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        p->desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  // The heuristic chooses by the bias and aux pointers' alignments (in the key).
  STRATA_RETURN_IF_ERROR(set_pointers(*p, args));
  STRATA_ASSIGN_OR_RETURN(p->first,
                          make_layout(args.dtype_ab, args.trans_b ? k : n, args.trans_b ? n : k));
  STRATA_ASSIGN_OR_RETURN(p->second,
                          make_layout(args.dtype_ab, args.trans_a ? m : k, args.trans_a ? k : m));
  STRATA_ASSIGN_OR_RETURN(p->result, make_layout(args.dtype_c, n, m));

  cublasLtMatmulPreference_t pref_raw = nullptr;
  STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref_raw));
  LtPreference pref(pref_raw);
  const uint64_t ws = cs->workspace_bytes();
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
        cublasLtMatmulPreferenceSetAttribute(pref.get(), attr, &align, sizeof(align)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle_, p->desc.get(), p->first.get(), p->second.get(), p->result.get(), p->result.get(),
      pref.get(), 1, &result, &count);
  if (epilogue == CUBLASLT_EPILOGUE_DEFAULT) {
    STRATA_CUBLAS_RETURN_IF_ERROR(st);
    if (count == 0) {
      return make_error(ErrorCode::kUnsupported, "matmul: cuBLASLt has no algorithm for M=", m,
                        " N=", n, " K=", k);
    }
  }
  // With an epilogue, no algorithm (or a refusal) leaves the plan unusable: matmul then runs the
  // epilogue as its own kernels.
  p->usable = st == CUBLAS_STATUS_SUCCESS && count > 0;
  if (p->usable) p->algo = result.algo;
  return plans_.emplace(key, std::move(p)).first->second.get();
}

Status CudaKernels::set_pointers(Plan& p, const MatmulArgs& args) {
  if (args.bias != nullptr) {
    STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        p.desc.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias, sizeof(args.bias)));
  }
  if (args.aux != nullptr) {
    STRATA_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        p.desc.get(), CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &args.aux, sizeof(args.aux)));
  }
  return ok_status();
}

Status CudaKernels::matmul(Stream& s, const MatmulArgs& args) {
  STRATA_RETURN_IF_ERROR(check_matmul(args));
  STRATA_ASSIGN_OR_RETURN(CudaStream * cs, cuda_stream(s));
  if (!epilogue_fuses(args)) return matmul_in_sequence(s, args);
  const uint32_t epilogue = lt_epilogue(args);
  const uint32_t align =
      std::min({alignment_of(args.a), alignment_of(args.b), alignment_of(args.c)});
  const PlanKey key{cs,
                    args.m,
                    args.n,
                    args.k,
                    args.trans_a,
                    args.trans_b,
                    static_cast<int>(args.dtype_ab),
                    static_cast<int>(args.dtype_c),
                    align,
                    epilogue,
                    args.bias != nullptr ? alignment_of(args.bias) : 0,
                    args.aux != nullptr ? alignment_of(args.aux) : 0};
  STRATA_ASSIGN_OR_RETURN(Plan * p, plan(key, args, epilogue, align, cs));
  if (!p->usable) {
    if (args.epilogue != Epilogue::kNone) return matmul_in_sequence(s, args);
    MatmulArgs plain = args;  // the bias epilogue refused: the matmul, then the bias kernel
    plain.bias = nullptr;
    STRATA_RETURN_IF_ERROR(matmul(s, plain));
    return cuda_status(launch_add_bias_rows(cs->handle(), args.c, args.bias, args.m, args.n,
                                            elem_type(args.dtype_c)),
                       "matmul bias");
  }
  // The plan is this stream's (the key holds it), and a stream is used by one thread at a time.
  STRATA_RETURN_IF_ERROR(set_pointers(*p, args));
  STRATA_CUBLAS_RETURN_IF_ERROR(
      cublasLtMatmul(handle_, p->desc.get(), &args.alpha, args.b, p->first.get(), args.a,
                     p->second.get(), &args.beta, args.c, p->result.get(), args.c, p->result.get(),
                     &p->algo, cs->workspace(), cs->workspace_bytes(), cs->handle()));
  return ok_status();
}

}  // namespace strata::gpu::cuda

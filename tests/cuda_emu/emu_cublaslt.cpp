// The emulated cuBLASLt (cuda_emu.h, include/cublasLt.h): column-major D = alpha op(A) op(B) +
// beta C on a stream, computed by the fp32 reference of tests/gpu_simt/reference_gemm.h (which
// the SIMT device's matmul computes too). It accepts only what strata's contract sets up
// (kernels.h: fp32 accumulation): compute type CUBLAS_COMPUTE_32F with fp32 scale, A and B of one
// type, C and D of one layout, and a preference that restricts split-K reductions to the compute
// type; anything else is refused with a line on stderr saying why, as cuBLASLt's logger would.
// The epilogues strata uses (BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU) are applied to each element's
// fp32 value before the rounding (reference_gemm.h), with cuBLASLt's documented requirements: a
// bias of D's type, one element a row of D; an aux matrix of D's type whose leading dimension is a
// multiple of 8 and at least D's rows; the bias and aux pointers given before the heuristic is
// asked (it chooses by their alignment) and at least as aligned at the call.
#include <cstdio>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "emu_internal.h"
#include "include/cublasLt.h"
#include "reference_gemm.h"

struct cublasLtContext {
  int device;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N;
  cublasOperation_t transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
  uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;  // cuBLASLt's default: any scheme
  uint32_t min_alignment[4] = {256, 256, 256, 256};          // A, B, C, D (default: 256)
};

namespace {

constexpr uint64_t kAlgoMagic = 0x5354524154414c47ull;  // marks an algo the heuristic returned

cublasStatus_t refuse(cublasStatus_t st, const std::string& why) {
  std::fprintf(stderr, "cuBLASLt (emulated): %s\n", why.c_str());
  return st;
}

size_t type_bytes(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }
bool known_type(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }
strata::DType dtype(cudaDataType_t t) {
  return t == CUDA_R_32F   ? strata::DType::kF32
         : t == CUDA_R_16F ? strata::DType::kF16
                           : strata::DType::kBF16;
}

// Bytes a column-major layout spans.
size_t span_bytes(const cublasLtMatrixLayoutOpaque_t& l) {
  return ((l.cols - 1) * static_cast<uint64_t>(l.ld) + l.rows) * type_bytes(l.type);
}

// Checks the shapes: op(A) is m x k, op(B) k x n, C and D m x n.
cublasStatus_t check_shapes(const cublasLtMatmulDescOpaque_t& op,
                            const cublasLtMatrixLayoutOpaque_t& a,
                            const cublasLtMatrixLayoutOpaque_t& b,
                            const cublasLtMatrixLayoutOpaque_t& c,
                            const cublasLtMatrixLayoutOpaque_t& d) {
  if (op.compute != CUBLAS_COMPUTE_32F || op.scale != CUDA_R_32F) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "compute type " + std::to_string(op.compute) + " / scale type " +
                      std::to_string(op.scale) +
                      ": strata's contract is CUBLAS_COMPUTE_32F with fp32 scale (no TF32)");
  }
  const uint64_t m = op.transa == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t k = op.transa == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = op.transb == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t n = op.transb == CUBLAS_OP_N ? b.cols : b.rows;
  for (const auto* l : {&a, &b, &c, &d}) {
    if (l->rows == 0 || l->cols == 0 || l->ld < static_cast<int64_t>(l->rows)) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "a layout with rows " + std::to_string(l->rows) +
                                                     ", cols " + std::to_string(l->cols) + ", ld " +
                                                     std::to_string(l->ld));
    }
  }
  if (k != kb || c.rows != m || c.cols != n || d.rows != m || d.cols != n) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "shapes do not match: op(A) " + std::to_string(m) + "x" + std::to_string(k) +
                      ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) + ", C " +
                      std::to_string(c.rows) + "x" + std::to_string(c.cols));
  }
  if (a.type != b.type || c.type != d.type || c.ld != d.ld ||
      !(c.type == a.type || c.type == CUDA_R_32F)) {
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "types A " + std::to_string(a.type) + ", B " + std::to_string(b.type) + ", C " +
                      std::to_string(c.type) + ", D " + std::to_string(d.type) +
                      ": A and B of one type, C and D alike, C of A's type or fp32");
  }
  return CUBLAS_STATUS_SUCCESS;
}

uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

bool has_bias(uint32_t epilogue) { return (epilogue & CUBLASLT_EPILOGUE_BIAS) != 0; }
bool has_aux(uint32_t epilogue) { return (epilogue & 128) != 0; }

// The epilogue's own requirements, given D's layout.
cublasStatus_t check_epilogue(const cublasLtMatmulDescOpaque_t& op,
                              const cublasLtMatrixLayoutOpaque_t& d) {
  switch (op.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU: break;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "epilogue " + std::to_string(op.epilogue) +
                        " is not one strata uses (DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU)");
  }
  if (has_bias(op.epilogue) && op.bias == nullptr) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "a bias epilogue without BIAS_POINTER");
  }
  if (has_aux(op.epilogue) &&
      (op.aux == nullptr || op.aux_ld % 8 != 0 || op.aux_ld < static_cast<int64_t>(d.rows))) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "a GELU aux epilogue needs EPILOGUE_AUX_POINTER and an EPILOGUE_AUX_LD divisible "
                  "by 8 and at least D's rows (" +
                      std::to_string(d.rows) + "); got ld " + std::to_string(op.aux_ld));
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

using cuda_emu::detail::enter;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (enter("cublasLtCreate") != cudaSuccess || handle == nullptr) {
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *handle = new cublasLtContext{cuda_emu::detail::current_device()};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
  if (desc == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->epilogue, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (bytes != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->bias, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if (bytes != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->aux, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if (bytes != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->aux_ld, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "matmul descriptor attribute " + std::to_string(attr) +
                        " is not one strata sets (TRANSA, TRANSB, EPILOGUE, BIAS_POINTER, "
                        "EPILOGUE_AUX_POINTER, EPILOGUE_AUX_LD)");
  }
  if (bytes != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
  cublasOperation_t v;
  std::memcpy(&v, buf, bytes);
  if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
  (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->transa : desc->transb) = v;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr || !known_type(type)) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  if (pref == nullptr || buf == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (bytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->max_workspace, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->reduction_mask, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      if (bytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&pref->min_alignment[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf,
                  bytes);
      return CUBLAS_STATUS_SUCCESS;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "preference attribute " + std::to_string(attr) + " is not one strata sets");
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (op == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr ||
      pref == nullptr || requested < 1 || results == nullptr || returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (const cublasStatus_t st = check_shapes(*op, *a, *b, *c, *d); st != CUBLAS_STATUS_SUCCESS) {
    return st;
  }
  if (const cublasStatus_t st = check_epilogue(*op, *d); st != CUBLAS_STATUS_SUCCESS) return st;
  // kernels.h: every matmul accumulates in fp32. A split-K algorithm reducing in place in the
  // output or in the output type would not, for 16-bit outputs.
  if ((pref->reduction_mask &
       (CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE)) != 0) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "the preference's CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK (" +
                      std::to_string(pref->reduction_mask) +
                      ") allows split-K reductions in place or in the output type: strata's "
                      "contract is fp32 accumulation (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)");
  }
  for (uint32_t align : pref->min_alignment) {
    if (align == 0 || (align & (align - 1)) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  }
  results[0] = cublasLtMatmulHeuristicResult_t{};
  results[0].algo.data[0] = kAlgoMagic;
  for (int i = 0; i < 4; ++i) results[0].algo.data[1 + i] = pref->min_alignment[i];
  // The epilogue and its pointers' alignments, as cuBLASLt chooses by them.
  results[0].algo.data[5] = op->epilogue;
  results[0].algo.data[6] = has_bias(op->epilogue) ? alignment_of(op->bias) : 1;
  results[0].algo.data[7] = has_aux(op->epilogue) ? alignment_of(op->aux) : 1;
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  cuda_emu::detail::counters().heuristics++;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  using cuda_emu::detail::device_of;
  if (enter("cublasLtMatmul") != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (op == nullptr || alpha == nullptr || beta == nullptr || a_desc == nullptr ||
      b_desc == nullptr || c_desc == nullptr || d_desc == nullptr || a == nullptr || b == nullptr ||
      c == nullptr || d == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (algo == nullptr || algo->data[0] != kAlgoMagic) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "an algorithm that cublasLtMatmulAlgoGetHeuristic did not return");
  }
  if (const cublasStatus_t st = check_shapes(*op, *a_desc, *b_desc, *c_desc, *d_desc);
      st != CUBLAS_STATUS_SUCCESS) {
    return st;
  }
  if (const cublasStatus_t st = check_epilogue(*op, *d_desc); st != CUBLAS_STATUS_SUCCESS) {
    return st;
  }
  if (algo->data[5] != op->epilogue) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "an algorithm chosen for another epilogue");
  }
  const int device = cuda_emu::detail::stream_device(stream);
  if (device < 0 || device != handle->device || device != cuda_emu::detail::current_device()) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "the stream, the handle and the current device are not one device");
  }
  const void* ptrs[4] = {a, b, c, d};
  const cublasLtMatrixLayoutOpaque_t* layouts[4] = {a_desc, b_desc, c_desc, d_desc};
  const char* names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    if (device_of(ptrs[i], span_bytes(*layouts[i])) != device) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    std::string(names[i]) + " is not device memory of the stream's device for " +
                        std::to_string(span_bytes(*layouts[i])) + " bytes");
    }
    if (alignment_of(ptrs[i]) < algo->data[1 + i]) {
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    std::string(names[i]) + " is less aligned than the algorithm was chosen for");
    }
  }
  const cublasLtMatmulDescOpaque_t& e = *op;
  const size_t elem = type_bytes(d_desc->type);
  if (has_bias(e.epilogue) &&
      (device_of(e.bias, d_desc->rows * elem) != device || alignment_of(e.bias) < algo->data[6])) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "the bias is not device memory of D's rows, or less aligned than the algorithm "
                  "was chosen for");
  }
  const size_t aux_bytes =
      ((d_desc->cols - 1) * static_cast<uint64_t>(e.aux_ld) + d_desc->rows) * elem;
  if (has_aux(e.epilogue) &&
      (device_of(e.aux, aux_bytes) != device || alignment_of(e.aux) < algo->data[7])) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "aux is not device memory for " + std::to_string(aux_bytes) +
                      " bytes, or less aligned than the algorithm was chosen for");
  }
  if (workspace_bytes > 0 && device_of(workspace, workspace_bytes) != device) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "the workspace is not device memory");
  }
  float alpha_v, beta_v;
  std::memcpy(&alpha_v, alpha, sizeof(float));
  std::memcpy(&beta_v, beta, sizeof(float));
  const cublasLtMatmulDescOpaque_t o = *op;
  const cublasLtMatrixLayoutOpaque_t la = *a_desc, lb = *b_desc, lc = *c_desc, ld = *d_desc;
  simt::GemmEpilogue epilogue;
  epilogue.kind = o.epilogue == CUBLASLT_EPILOGUE_BIAS    ? simt::GemmEpilogue::kBias
                  : o.epilogue == CUBLASLT_EPILOGUE_DGELU ? simt::GemmEpilogue::kDGelu
                  : has_aux(o.epilogue)                   ? simt::GemmEpilogue::kGeluAux
                                                          : simt::GemmEpilogue::kNone;
  epilogue.bias = has_bias(o.epilogue) ? o.bias : nullptr;
  epilogue.aux = o.aux;
  epilogue.ld_aux = o.aux_ld;
  const cudaError_t err = cuda_emu::detail::enqueue(
      stream,
      [=] {
        const auto k = static_cast<int64_t>(o.transa == CUBLAS_OP_N ? la.cols : la.rows);
        simt::reference_gemm(o.transa == CUBLAS_OP_T, o.transb == CUBLAS_OP_T,
                             static_cast<int64_t>(ld.rows), static_cast<int64_t>(ld.cols), k,
                             alpha_v, a, la.ld, b, lb.ld, dtype(la.type), beta_v, c, d, lc.ld,
                             dtype(ld.type), epilogue);
        cuda_emu::detail::counters().matmuls++;
      },
      "cublasLtMatmul");
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return cublasLtGetStatusName(status);
  }
}

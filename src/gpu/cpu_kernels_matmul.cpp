// CpuKernels: matmul (OpenBLAS sgemm over fixed output tiles inside TBB tasks) and
// bias_backward.
//
// Threading: OpenBLAS is set to one thread once, when the first CpuKernels is made, and every
// cblas_sgemm call computes one fixed tile of C inside a TBB task, so the cores have one owner
// (the device's task_arena). 16-bit A/B are converted whole to fp32 first (stream scratch); a
// 16-bit C is computed in an fp32 tile and rounded once.
#include <cblas.h>

#include <algorithm>
#include <mutex>

#include "gpu/cpu_device_impl.h"
#include "gpu/cpu_kernels.h"
#include "gpu/cpu_stream.h"

namespace strata::gpu {

using namespace cpu_detail;

namespace {

constexpr int64_t kTileRows = 64;
constexpr int64_t kTileCols = 512;

// Converts the whole of a 16-bit (or copies an fp32) matrix of `numel` elements to fp32.
void convert_parallel(const void* src, DType t, int64_t numel, float* dst) {
  parallel_chunks(numel, 1 << 16, [&](int64_t lo, int64_t hi) {
    load_f32(src, t, static_cast<size_t>(lo), static_cast<size_t>(hi - lo), dst + lo);
  });
}

}  // namespace

void cpu_detail::make_blas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

Status CpuKernels::matmul(Stream& s, const MatmulArgs& args) {
  STRATA_RETURN_IF_ERROR(check_dtype("matmul", args.dtype_ab));
  STRATA_RETURN_IF_ERROR(check_dtype("matmul", args.dtype_c));
  STRATA_RETURN_IF_ERROR(check_positive("matmul", "m", args.m));
  STRATA_RETURN_IF_ERROR(check_positive("matmul", "n", args.n));
  STRATA_RETURN_IF_ERROR(check_positive("matmul", "k", args.k));
  STRATA_RETURN_IF_ERROR(check_pointer("matmul", "a", args.a));
  STRATA_RETURN_IF_ERROR(check_pointer("matmul", "b", args.b));
  STRATA_RETURN_IF_ERROR(check_pointer("matmul", "c", args.c));
  STRATA_RETURN_IF_ERROR(check_epilogue(args));
  if (args.epilogue != Epilogue::kNone) return matmul_in_sequence(s, args);
  const int64_t limit = int64_t{1} << 31;
  if (args.m >= limit || args.n >= limit || args.k >= limit) {
    return make_error(ErrorCode::kUnsupported, "matmul: shape ", args.m, "x", args.n, "x", args.k,
                      " exceeds the 32-bit BLAS index range");
  }
  const MatmulArgs a = args;
  return launch(s, "matmul", [a](CpuStream& cs) {
    const int64_t M = a.m, N = a.n, K = a.k;
    const float* A = static_cast<const float*>(a.a);
    const float* Bm = static_cast<const float*>(a.b);
    if (a.dtype_ab != DType::kF32) {
      float* a32 = cs.scratch(0, static_cast<size_t>(M * K));
      float* b32 = cs.scratch(1, static_cast<size_t>(K * N));
      convert_parallel(a.a, a.dtype_ab, M * K, a32);
      convert_parallel(a.b, a.dtype_ab, K * N, b32);
      A = a32;
      Bm = b32;
    }
    const bool c32 = a.dtype_c == DType::kF32;
    const int lda = static_cast<int>(a.trans_a ? M : K);
    const int ldb = static_cast<int>(a.trans_b ? K : N);
    const int64_t tile_cols = M < kTileRows ? std::min<int64_t>(N, 256) : kTileCols;
    const int64_t row_tiles = (M + kTileRows - 1) / kTileRows;
    const int64_t col_tiles = (N + tile_cols - 1) / tile_cols;
    parallel_chunks(row_tiles * col_tiles, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t i0 = (t / col_tiles) * kTileRows;
        const int64_t j0 = (t % col_tiles) * tile_cols;
        const int64_t mr = std::min(kTileRows, M - i0);
        const int64_t nc = std::min(tile_cols, N - j0);
        const float* ap = a.trans_a ? A + i0 : A + i0 * K;
        const float* bp = a.trans_b ? Bm + j0 * K : Bm + j0;
        float* cp;
        int ldc;
        if (c32) {
          cp = static_cast<float*>(a.c) + i0 * N + j0;
          ldc = static_cast<int>(N);
        } else {
          cp = scratch(0, static_cast<size_t>(mr * nc));
          ldc = static_cast<int>(nc);
          if (a.beta != 0.0f) {
            for (int64_t r = 0; r < mr; ++r) {
              load_f32(a.c, a.dtype_c, static_cast<size_t>((i0 + r) * N + j0),
                       static_cast<size_t>(nc), cp + r * nc);
            }
          }
        }
        cblas_sgemm(CblasRowMajor, a.trans_a ? CblasTrans : CblasNoTrans,
                    a.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(mr),
                    static_cast<int>(nc), static_cast<int>(K), a.alpha, ap, lda, bp, ldb, a.beta,
                    cp, ldc);
        if (a.bias != nullptr) {
          float* bias = scratch(1, static_cast<size_t>(nc));
          load_f32(a.bias, a.dtype_c, static_cast<size_t>(j0), static_cast<size_t>(nc), bias);
          for (int64_t r = 0; r < mr; ++r) {
            float* row = cp + r * ldc;
            for (int64_t j = 0; j < nc; ++j) row[j] += bias[j];
          }
        }
        if (!c32) {
          for (int64_t r = 0; r < mr; ++r) {
            store_f32(cp + r * nc, a.c, a.dtype_c, static_cast<size_t>((i0 + r) * N + j0),
                      static_cast<size_t>(nc));
          }
        }
      }
    });
    return ok_status();
  });
}

Status CpuKernels::bias_backward(Stream& s, void* dbias, const void* dout, int64_t m, int64_t n,
                                 DType dtype, bool accumulate) {
  STRATA_RETURN_IF_ERROR(check_dtype("bias_backward", dtype));
  STRATA_RETURN_IF_ERROR(check_positive("bias_backward", "m", m));
  STRATA_RETURN_IF_ERROR(check_positive("bias_backward", "n", n));
  STRATA_RETURN_IF_ERROR(check_pointer("bias_backward", "dbias", dbias));
  STRATA_RETURN_IF_ERROR(check_pointer("bias_backward", "dout", dout));
  return launch(s, "bias_backward", [=](CpuStream&) {
    constexpr int64_t kCols = 64;
    // Each task owns a fixed column block and sums the rows in order: deterministic, no races.
    parallel_chunks(n, kCols, [&](int64_t j0, int64_t j1) {
      const size_t w = static_cast<size_t>(j1 - j0);
      float acc[kCols] = {};
      float* row = scratch(0, w);
      for (int64_t r = 0; r < m; ++r) {
        load_f32(dout, dtype, static_cast<size_t>(r * n + j0), w, row);
        for (size_t j = 0; j < w; ++j) acc[j] += row[j];
      }
      if (accumulate) {
        float* prev = scratch(1, w);
        load_f32(dbias, dtype, static_cast<size_t>(j0), w, prev);
        for (size_t j = 0; j < w; ++j) acc[j] += prev[j];
      }
      store_f32(acc, dbias, dtype, static_cast<size_t>(j0), w);
    });
    return ok_status();
  });
}

}  // namespace strata::gpu

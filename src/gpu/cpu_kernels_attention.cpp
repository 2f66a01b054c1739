// CpuKernels: causal self-attention forward and backward (flash-style: the forward saves the
// log-sum-exp of each row's scores, the backward recomputes the probabilities from it).
// Grouped-query attention: query head h reads key/value head h / (NH / NKV).
// Forward tasks: one per (batch, query head, block of query rows); backward tasks: one per
// (batch, key/value head), which owns the slices of dqkv of that head and of its group's query
// heads, and sums the group's contributions to dK and dV in head order (no races, fixed order). The
// products (Q K^T, P V and the backward's five) are single-threaded OpenBLAS sgemm calls inside the
// task.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "gpu/cpu_device_impl.h"
#include "gpu/cpu_kernels.h"
#include "gpu/cpu_stream.h"

namespace strata::gpu {

using namespace cpu_detail;

namespace {

constexpr int64_t kQueryBlock = 64;

Status check_attention(const char* op, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                       DType dtype) {
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "B", B));
  STRATA_RETURN_IF_ERROR(check_positive(op, "T", T));
  STRATA_RETURN_IF_ERROR(check_positive(op, "C", C));
  STRATA_RETURN_IF_ERROR(check_positive(op, "NH", NH));
  STRATA_RETURN_IF_ERROR(check_positive(op, "NKV", NKV));
  if (C % NH != 0) {
    return make_error(ErrorCode::kConfig, op, ": C = ", C, " is not a multiple of NH = ", NH);
  }
  if (NH % NKV != 0) {
    return make_error(ErrorCode::kConfig, op, ": NH = ", NH, " is not a multiple of NKV = ", NKV);
  }
  return ok_status();
}

// Where the heads lie in a qkv row: q heads at h * HS, k heads at C + h * HS, v heads at
// C + NKV * HS + h * HS; rows `width` = C + 2 * NKV * HS apart.
struct QkvRow {
  int64_t C, HS, NKV, width;
  int64_t offset(int part, int64_t h) const {
    return part == 0 ? h * HS : C + (part - 1) * NKV * HS + h * HS;
  }
};

// Copies rows [t0, t1) of one head's q, k or v (part 0, 1, 2) of qkv into dst [t,HS].
void load_head(const void* qkv, DType dtype, const QkvRow& layout, int64_t b, int64_t T, int64_t h,
               int part, int64_t t0, int64_t t1, float* dst) {
  for (int64_t t = t0; t < t1; ++t) {
    const size_t off = static_cast<size_t>((b * T + t) * layout.width + layout.offset(part, h));
    load_f32(qkv, dtype, off, static_cast<size_t>(layout.HS), dst + (t - t0) * layout.HS);
  }
}

int to_int(int64_t v) { return static_cast<int>(v); }

float dot(const float* x, const float* y, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += x[i] * y[i];
  return acc;
}

}  // namespace

Status CpuKernels::attention_forward(Stream& s, void* out, float* lse, const void* qkv, int64_t B,
                                     int64_t T, int64_t C, int64_t NH, int64_t NKV, DType dtype) {
  const char* op = "attention_forward";
  STRATA_RETURN_IF_ERROR(check_attention(op, B, T, C, NH, NKV, dtype));
  STRATA_RETURN_IF_ERROR(check_pointer(op, "out", out));
  STRATA_RETURN_IF_ERROR(check_pointer(op, "lse", lse));
  STRATA_RETURN_IF_ERROR(check_pointer(op, "qkv", qkv));
  return launch(s, op, [=](CpuStream&) {
    const int64_t HS = C / NH;
    const QkvRow layout{C, HS, NKV, C + 2 * NKV * HS};
    const int64_t group = NH / NKV;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    const int64_t qblocks = (T + kQueryBlock - 1) / kQueryBlock;
    parallel_chunks(B * NH * qblocks, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t task = i0; task < i1; ++task) {
        const int64_t qb = task % qblocks;
        const int64_t h = (task / qblocks) % NH;
        const int64_t b = task / (qblocks * NH);
        const int64_t t0 = qb * kQueryBlock;
        const int64_t t1 = std::min(T, t0 + kQueryBlock);
        const int64_t nq = t1 - t0;
        const size_t hs = static_cast<size_t>(HS);
        float* q = scratch(0, static_cast<size_t>(nq) * hs);
        float* k = scratch(1, static_cast<size_t>(t1) * hs);
        float* v = scratch(2, static_cast<size_t>(t1) * hs);
        float* p = scratch(3, static_cast<size_t>(nq * t1));  // scores, then probabilities
        float* o = scratch(4, static_cast<size_t>(nq) * hs);
        load_head(qkv, dtype, layout, b, T, h, 0, t0, t1, q);
        load_head(qkv, dtype, layout, b, T, h / group, 1, 0, t1, k);
        load_head(qkv, dtype, layout, b, T, h / group, 2, 0, t1, v);
        // P[nq, t1] = scale * Q K^T; only columns u <= t are used.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, to_int(nq), to_int(t1), to_int(HS),
                    scale, q, to_int(HS), k, to_int(HS), 0.0f, p, to_int(t1));
        for (int64_t t = t0; t < t1; ++t) {
          float* row = p + (t - t0) * t1;
          float mx = -INFINITY;
          for (int64_t u = 0; u <= t; ++u) mx = std::max(mx, row[u]);
          float sum = 0.0f;
          for (int64_t u = 0; u <= t; ++u) {
            row[u] = std::exp(row[u] - mx);
            sum += row[u];
          }
          const float inv = 1.0f / sum;
          for (int64_t u = 0; u <= t; ++u) row[u] *= inv;
          std::fill(row + t + 1, row + t1, 0.0f);
          lse[(b * NH + h) * T + t] = mx + std::log(sum);
        }
        // O[nq, HS] = P V.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, to_int(nq), to_int(HS), to_int(t1),
                    1.0f, p, to_int(t1), v, to_int(HS), 0.0f, o, to_int(HS));
        for (int64_t t = t0; t < t1; ++t) {
          store_f32(o + (t - t0) * HS, out, dtype, static_cast<size_t>((b * T + t) * C + h * HS),
                    hs);
        }
      }
    });
    return ok_status();
  });
}

Status CpuKernels::attention_backward(Stream& s, void* dqkv, const void* dout, const void* qkv,
                                      const void* out, const float* lse, int64_t B, int64_t T,
                                      int64_t C, int64_t NH, int64_t NKV, DType dtype) {
  const char* op = "attention_backward";
  STRATA_RETURN_IF_ERROR(check_attention(op, B, T, C, NH, NKV, dtype));
  for (auto [name, p] : {std::pair<const char*, const void*>{"dqkv", dqkv},
                         {"dout", dout},
                         {"qkv", qkv},
                         {"out", out},
                         {"lse", lse}}) {
    STRATA_RETURN_IF_ERROR(check_pointer(op, name, p));
  }
  return launch(s, op, [=](CpuStream&) {
    const int64_t HS = C / NH;
    const QkvRow layout{C, HS, NKV, C + 2 * NKV * HS};
    const int64_t group = NH / NKV;
    const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
    parallel_chunks(B * NKV, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t task = i0; task < i1; ++task) {
        const int64_t kvh = task % NKV;
        const int64_t b = task / NKV;
        const size_t th = static_cast<size_t>(T * HS);
        const size_t tt = static_cast<size_t>(T * T);
        const size_t hs = static_cast<size_t>(HS);
        // Scratch: q k v dout | dq dk dv (T x HS each) | P, dP (T x T) | D (T) | one out row.
        float* buf = scratch(0, 7 * th + 2 * tt + static_cast<size_t>(T) + hs);
        float* q = buf;
        float* k = q + th;
        float* v = k + th;
        float* go = v + th;
        float* dq = go + th;
        float* dk = dq + th;
        float* dv = dk + th;
        float* p = dv + th;
        float* dp = p + tt;
        float* D = dp + tt;
        float* orow = D + T;
        load_head(qkv, dtype, layout, b, T, kvh, 1, 0, T, k);
        load_head(qkv, dtype, layout, b, T, kvh, 2, 0, T, v);
        const int iT = to_int(T), iH = to_int(HS);
        for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
          load_head(qkv, dtype, layout, b, T, h, 0, 0, T, q);
          for (int64_t t = 0; t < T; ++t) {
            const size_t r = static_cast<size_t>((b * T + t) * C + h * HS);
            load_f32(dout, dtype, r, hs, go + t * HS);
            load_f32(out, dtype, r, hs, orow);
            D[t] = dot(go + t * HS, orow, HS);  // D_t = sum_i dout_ti out_ti
          }
          // P = exp(scale Q K^T - lse) (causal), dP = dO V^T.
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, iT, iT, iH, scale, q, iH, k, iH,
                      0.0f, p, iT);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, iT, iT, iH, 1.0f, go, iH, v, iH,
                      0.0f, dp, iT);
          for (int64_t t = 0; t < T; ++t) {
            float* pr = p + t * T;
            float* dr = dp + t * T;
            const float l = lse[(b * NH + h) * T + t];
            for (int64_t u = 0; u <= t; ++u) {
              pr[u] = std::exp(pr[u] - l);
              dr[u] = pr[u] * (dr[u] - D[t]) * scale;  // dS, with the score scale folded in
            }
            std::fill(pr + t + 1, pr + T, 0.0f);
            std::fill(dr + t + 1, dr + T, 0.0f);
          }
          // dQ = dS K; dK += dS^T Q, dV += P^T dO over the group's heads in order.
          const float acc = h == kvh * group ? 0.0f : 1.0f;
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, iT, iH, iT, 1.0f, dp, iT, k, iH,
                      0.0f, dq, iH);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, iT, iH, iT, 1.0f, dp, iT, q, iH, acc,
                      dk, iH);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, iT, iH, iT, 1.0f, p, iT, go, iH, acc,
                      dv, iH);
          for (int64_t t = 0; t < T; ++t) {
            store_f32(dq + t * HS, dqkv, dtype,
                      static_cast<size_t>((b * T + t) * layout.width + layout.offset(0, h)), hs);
          }
        }
        for (int64_t t = 0; t < T; ++t) {
          const auto base = static_cast<size_t>((b * T + t) * layout.width);
          store_f32(dk + t * HS, dqkv, dtype, base + static_cast<size_t>(layout.offset(1, kvh)),
                    hs);
          store_f32(dv + t * HS, dqkv, dtype, base + static_cast<size_t>(layout.offset(2, kvh)),
                    hs);
        }
      }
    });
    return ok_status();
  });
}

}  // namespace strata::gpu

// CpuKernels: the operations of Llama-shaped models: RMSNorm, rotary position embeddings and the
// SwiGLU activation, forward and backward (gpu/kernels.h states their semantics). Rows in
// parallel; a parameter gradient is summed per column in row order: the same bits for any
// thread count.
#include <cmath>
#include <vector>

#include "gpu/cpu_device_impl.h"
#include "gpu/cpu_kernels.h"
#include "gpu/cpu_stream.h"

namespace strata::gpu {

using namespace cpu_detail;

namespace {
constexpr int64_t kRowGrain = 16;    // rows per task
constexpr int64_t kColBlock = 64;    // columns per task of the weight gradient
constexpr int64_t kElemRows = 1024;  // SwiGLU: rows per task when H is small

Status check_pointers(const char* op,
                      std::initializer_list<std::pair<const char*, const void*>> ps) {
  for (auto [name, p] : ps) STRATA_RETURN_IF_ERROR(check_pointer(op, name, p));
  return ok_status();
}

float sigmoid(float a) { return 1.0f / (1.0f + std::exp(-a)); }
}  // namespace

Status CpuKernels::rmsnorm_forward(Stream& s, void* out, float* rstd, const void* inp,
                                   const void* weight, int64_t N, int64_t C, float eps,
                                   DType dtype) {
  const char* op = "rmsnorm_forward";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "N", N));
  STRATA_RETURN_IF_ERROR(check_positive(op, "C", C));
  STRATA_RETURN_IF_ERROR(
      check_pointers(op, {{"out", out}, {"rstd", rstd}, {"inp", inp}, {"weight", weight}}));
  return launch(s, op, [=](CpuStream&) {
    parallel_chunks(N, kRowGrain, [&](int64_t r0, int64_t r1) {
      const size_t c = static_cast<size_t>(C);
      float* x = scratch(0, c);
      float* w = scratch(1, c);
      load_f32(weight, dtype, 0, c, w);
      for (int64_t r = r0; r < r1; ++r) {
        load_f32(inp, dtype, static_cast<size_t>(r) * c, c, x);
        float sq = 0.0f;
        for (size_t i = 0; i < c; ++i) sq += x[i] * x[i];
        const float rs = 1.0f / std::sqrt(sq / static_cast<float>(C) + eps);
        for (size_t i = 0; i < c; ++i) x[i] = x[i] * rs * w[i];
        store_f32(x, out, dtype, static_cast<size_t>(r) * c, c);
        rstd[r] = rs;
      }
    });
    return ok_status();
  });
}

Status CpuKernels::rmsnorm_backward(Stream& s, void* dinp, void* dweight, const void* dout,
                                    const void* inp, const void* weight, const float* rstd,
                                    int64_t N, int64_t C, DType dtype) {
  const char* op = "rmsnorm_backward";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "N", N));
  STRATA_RETURN_IF_ERROR(check_positive(op, "C", C));
  STRATA_RETURN_IF_ERROR(check_pointers(op, {{"dinp", dinp},
                                             {"dweight", dweight},
                                             {"dout", dout},
                                             {"inp", inp},
                                             {"weight", weight},
                                             {"rstd", rstd}}));
  return launch(s, op, [=](CpuStream&) {
    const size_t c = static_cast<size_t>(C);
    // dinp += rstd * (w * dout - xhat * mean(w * dout * xhat)), xhat = inp * rstd.
    parallel_chunks(N, kRowGrain, [&](int64_t r0, int64_t r1) {
      float* x = scratch(0, c);
      float* g = scratch(1, c);
      float* w = scratch(2, c);
      float* d = scratch(3, c);
      load_f32(weight, dtype, 0, c, w);
      for (int64_t r = r0; r < r1; ++r) {
        const size_t off = static_cast<size_t>(r) * c;
        load_f32(inp, dtype, off, c, x);
        load_f32(dout, dtype, off, c, g);
        load_f32(dinp, dtype, off, c, d);
        const float rs = rstd[r];
        float dot = 0.0f;
        for (size_t i = 0; i < c; ++i) dot += w[i] * g[i] * (x[i] * rs);
        dot /= static_cast<float>(C);
        for (size_t i = 0; i < c; ++i) d[i] += (w[i] * g[i] - x[i] * rs * dot) * rs;
        store_f32(d, dinp, dtype, off, c);
      }
    });
    // dweight: each task owns a column block and walks the rows in order.
    parallel_chunks(C, kColBlock, [&](int64_t j0, int64_t j1) {
      const size_t w = static_cast<size_t>(j1 - j0);
      float dw[kColBlock] = {};
      float* x = scratch(0, w);
      float* g = scratch(1, w);
      for (int64_t r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * c + static_cast<size_t>(j0);
        load_f32(inp, dtype, off, w, x);
        load_f32(dout, dtype, off, w, g);
        const float rs = rstd[r];
        for (size_t i = 0; i < w; ++i) dw[i] += x[i] * rs * g[i];
      }
      float* prev = scratch(2, w);
      load_f32(dweight, dtype, static_cast<size_t>(j0), w, prev);
      for (size_t i = 0; i < w; ++i) prev[i] += dw[i];
      store_f32(prev, dweight, dtype, static_cast<size_t>(j0), w);
    });
    return ok_status();
  });
}

Status CpuKernels::rope(Stream& s, void* x, const float* inv_freq, int64_t B, int64_t T,
                        int64_t heads, int64_t HS, int64_t stride, bool inverse, DType dtype) {
  const char* op = "rope";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "B", B));
  STRATA_RETURN_IF_ERROR(check_positive(op, "T", T));
  STRATA_RETURN_IF_ERROR(check_positive(op, "heads", heads));
  STRATA_RETURN_IF_ERROR(check_positive(op, "HS", HS));
  if (HS % 2 != 0) return make_error(ErrorCode::kConfig, op, ": HS = ", HS, " is odd");
  if (stride < heads * HS) {
    return make_error(ErrorCode::kConfig, op, ": stride ", stride, " < heads * HS = ", heads * HS);
  }
  STRATA_RETURN_IF_ERROR(check_pointers(op, {{"x", x}, {"inv_freq", inv_freq}}));
  return launch(s, op, [=](CpuStream&) {
    const int64_t half = HS / 2;
    parallel_chunks(B * T, kRowGrain, [&](int64_t r0, int64_t r1) {
      const size_t n = static_cast<size_t>(heads * HS);
      float* v = scratch(0, n);
      float* cs = scratch(1, static_cast<size_t>(HS));  // cos | sin of the row's position
      for (int64_t r = r0; r < r1; ++r) {
        const float t = static_cast<float>(r % T);
        for (int64_t i = 0; i < half; ++i) {
          const float angle = t * inv_freq[i];
          cs[i] = std::cos(angle);
          cs[half + i] = inverse ? -std::sin(angle) : std::sin(angle);
        }
        const size_t off = static_cast<size_t>(r * stride);
        load_f32(x, dtype, off, n, v);
        for (int64_t h = 0; h < heads; ++h) {
          float* q = v + h * HS;
          for (int64_t i = 0; i < half; ++i) {
            const float a = q[i], b = q[i + half];
            q[i] = a * cs[i] - b * cs[half + i];
            q[i + half] = b * cs[i] + a * cs[half + i];
          }
        }
        store_f32(v, x, dtype, off, n);
      }
    });
    return ok_status();
  });
}

Status CpuKernels::swiglu_forward(Stream& s, void* out, const void* gate_up, int64_t N, int64_t H,
                                  DType dtype) {
  const char* op = "swiglu_forward";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "N", N));
  STRATA_RETURN_IF_ERROR(check_positive(op, "H", H));
  STRATA_RETURN_IF_ERROR(check_pointers(op, {{"out", out}, {"gate_up", gate_up}}));
  return launch(s, op, [=](CpuStream&) {
    const size_t h = static_cast<size_t>(H);
    parallel_chunks(N, std::max<int64_t>(1, kElemRows / H), [&](int64_t r0, int64_t r1) {
      float* gu = scratch(0, 2 * h);
      for (int64_t r = r0; r < r1; ++r) {
        load_f32(gate_up, dtype, static_cast<size_t>(r) * 2 * h, 2 * h, gu);
        for (size_t i = 0; i < h; ++i) gu[i] = gu[i] * sigmoid(gu[i]) * gu[h + i];
        store_f32(gu, out, dtype, static_cast<size_t>(r) * h, h);
      }
    });
    return ok_status();
  });
}

Status CpuKernels::swiglu_backward(Stream& s, void* dgate_up, const void* gate_up, const void* dout,
                                   int64_t N, int64_t H, DType dtype) {
  const char* op = "swiglu_backward";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "N", N));
  STRATA_RETURN_IF_ERROR(check_positive(op, "H", H));
  STRATA_RETURN_IF_ERROR(
      check_pointers(op, {{"dgate_up", dgate_up}, {"gate_up", gate_up}, {"dout", dout}}));
  return launch(s, op, [=](CpuStream&) {
    const size_t h = static_cast<size_t>(H);
    parallel_chunks(N, std::max<int64_t>(1, kElemRows / H), [&](int64_t r0, int64_t r1) {
      float* gu = scratch(0, 2 * h);
      float* g = scratch(1, h);
      for (int64_t r = r0; r < r1; ++r) {
        load_f32(gate_up, dtype, static_cast<size_t>(r) * 2 * h, 2 * h, gu);
        load_f32(dout, dtype, static_cast<size_t>(r) * h, h, g);
        for (size_t i = 0; i < h; ++i) {
          const float a = gu[i], up = gu[h + i];
          const float sg = sigmoid(a);
          gu[i] = g[i] * up * sg * (1.0f + a * (1.0f - sg));
          gu[h + i] = g[i] * a * sg;
        }
        store_f32(gu, dgate_up, dtype, static_cast<size_t>(r) * 2 * h, 2 * h);
      }
    });
    return ok_status();
  });
}

}  // namespace strata::gpu

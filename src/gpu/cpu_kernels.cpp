// CpuKernels: launch, conversion helpers, and the elementwise ops and reductions.
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "cpu/cpu_adam.h"
#include "gpu/cpu_device_impl.h"
#include "gpu/cpu_kernels.h"
#include "gpu/cpu_stream.h"

namespace strata::gpu {
namespace cpu_detail {

void load_f32(const void* src, DType t, size_t offset, size_t n, float* dst) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, static_cast<const float*>(src) + offset, n * 4); return;
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src) + offset;
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
  }
}

void store_f32(const float* src, void* dst, DType t, size_t offset, size_t n) {
  switch (t) {
    case DType::kF32: std::memcpy(static_cast<float*>(dst) + offset, src, n * 4); return;
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + offset;
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst) + offset;
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
  }
}

float* scratch(int slot, size_t n) {
  thread_local std::vector<float> buffers[kScratchSlots];
  std::vector<float>& v = buffers[slot];
  if (v.size() < n) v.resize(n);
  return v.data();
}

Status check_dtype(const char* op, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return make_error(ErrorCode::kConfig, op, ": dtype ", static_cast<int>(dtype),
                      " is not accepted (f32, f16 or bf16)");
  }
  return ok_status();
}

Status check_positive(const char* op, const char* name, int64_t v) {
  if (v <= 0) return make_error(ErrorCode::kConfig, op, ": ", name, " = ", v, " must be > 0");
  return ok_status();
}

Status check_pointer(const char* op, const char* name, const void* p) {
  if (p == nullptr) return make_error(ErrorCode::kConfig, op, ": ", name, " is null");
  return ok_status();
}

}  // namespace cpu_detail

using namespace cpu_detail;

namespace {

constexpr int64_t kElemChunk = 4096;  // elements per task of elementwise ops

float gelu_f(float x) {
  constexpr float kS = 0.7978845608028654f;  // sqrt(2/pi)
  const float u = kS * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}

float gelu_grad_f(float x) {
  constexpr float kS = 0.7978845608028654f;
  const float x2 = x * x;
  const float u = kS * (x + 0.044715f * x2 * x);
  const float th = std::tanh(u);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kS * (1.0f + 3.0f * 0.044715f * x2);
}

// out = op(a, b) elementwise, in fp32 and rounded once to out's dtype (out may be a).
template <typename Op>
void map2_in_fp32(void* out, DType out_dtype, const void* a, DType a_dtype, const void* b,
                  DType b_dtype, int64_t n, Op op) {
  parallel_chunks(n, kElemChunk, [&](int64_t lo, int64_t hi) {
    const size_t len = static_cast<size_t>(hi - lo);
    float* x = scratch(0, len);
    float* y = scratch(1, len);
    load_f32(a, a_dtype, lo, len, x);
    load_f32(b, b_dtype, lo, len, y);
    for (size_t i = 0; i < len; ++i) x[i] = op(x[i], y[i]);
    store_f32(x, out, out_dtype, lo, len);
  });
}

}  // namespace

CpuKernels::CpuKernels(CpuDevice* device) : device_(device) { make_blas_single_threaded(); }

Status CpuKernels::launch(Stream& s, const char* op, std::function<Status(CpuStream&)> body) {
  auto* cs = dynamic_cast<CpuStream*>(&s);
  if (cs == nullptr || cs->device() != device_) {
    return make_error(ErrorCode::kConfig, op, ": the stream does not belong to this cpu device");
  }
  CpuDevice* dev = device_;
  cs->enqueue([dev, cs, body = std::move(body)]() -> Status {
    if constexpr (kSerialKernels) return body(*cs);
    return dev->arena().execute([&]() -> Status { return body(*cs); });
  });
  return ok_status();
}

Status CpuKernels::adam_step(Stream& s, const AdamArgs& a) {
  if (a.numel < 0) return make_error(ErrorCode::kConfig, "adam_step: numel ", a.numel, " < 0");
  if (a.numel == 0) return ok_status();
  cpu::AdamBuffers b{a.params,     a.exp_avg, a.exp_avg_sq, a.grads,
                     a.grad_dtype, a.out16,   a.out_dtype,  a.numel};
  const cpu::CpuAdam adam(cpu::AdamHyper{});  // update() uses only the constants given
  // The same checks as at run time, so that bad arguments are refused when enqueued.
  STRATA_RETURN_IF_ERROR(adam.update(cpu::AdamBuffers{b.params, b.exp_avg, b.exp_avg_sq, b.grads,
                                                      b.grad_dtype, b.out16, b.out_dtype, 0},
                                     a.constants)
                             .with_context("adam_step"));
  for (const void* p : {static_cast<const void*>(a.params), static_cast<const void*>(a.exp_avg),
                        static_cast<const void*>(a.exp_avg_sq), a.grads}) {
    STRATA_RETURN_IF_ERROR(check_pointer("adam_step", "buffer", p));
  }
  const cpu::AdamConstants k = a.constants;
  return launch(s, "adam_step", [adam, b, k](CpuStream&) { return adam.update(b, k); });
}

Status CpuKernels::add(Stream& s, void* out, const void* a, const void* b, int64_t n, DType dtype) {
  STRATA_RETURN_IF_ERROR(check_dtype("add", dtype));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_positive("add", "n", n));
  STRATA_RETURN_IF_ERROR(check_pointer("add", "out", out));
  STRATA_RETURN_IF_ERROR(check_pointer("add", "a", a));
  STRATA_RETURN_IF_ERROR(check_pointer("add", "b", b));
  return launch(s, "add", [=](CpuStream&) {
    map2_in_fp32(out, dtype, a, dtype, b, dtype, n, std::plus<float>());
    return ok_status();
  });
}

Status CpuKernels::accumulate(Stream& s, void* dst, DType dst_dtype, const void* src,
                              DType src_dtype, int64_t n) {
  STRATA_RETURN_IF_ERROR(check_dtype("accumulate", dst_dtype));
  STRATA_RETURN_IF_ERROR(check_dtype("accumulate", src_dtype));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_positive("accumulate", "n", n));
  STRATA_RETURN_IF_ERROR(check_pointer("accumulate", "dst", dst));
  STRATA_RETURN_IF_ERROR(check_pointer("accumulate", "src", src));
  return launch(s, "accumulate", [=](CpuStream&) {
    map2_in_fp32(dst, dst_dtype, dst, dst_dtype, src, src_dtype, n, std::plus<float>());
    return ok_status();
  });
}

Status CpuKernels::scale(Stream& s, void* x, float factor, int64_t n, DType dtype) {
  STRATA_RETURN_IF_ERROR(check_dtype("scale", dtype));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_positive("scale", "n", n));
  STRATA_RETURN_IF_ERROR(check_pointer("scale", "x", x));
  return launch(s, "scale", [=](CpuStream&) {
    parallel_chunks(n, kElemChunk, [&](int64_t lo, int64_t hi) {
      const size_t len = static_cast<size_t>(hi - lo);
      float* v = scratch(0, len);
      load_f32(x, dtype, lo, len, v);
      for (size_t i = 0; i < len; ++i) v[i] *= factor;
      store_f32(v, x, dtype, lo, len);
    });
    return ok_status();
  });
}

Status CpuKernels::cast(Stream& s, void* dst, DType dst_dtype, const void* src, DType src_dtype,
                        int64_t n) {
  STRATA_RETURN_IF_ERROR(check_dtype("cast", dst_dtype));
  STRATA_RETURN_IF_ERROR(check_dtype("cast", src_dtype));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_positive("cast", "n", n));
  STRATA_RETURN_IF_ERROR(check_pointer("cast", "dst", dst));
  STRATA_RETURN_IF_ERROR(check_pointer("cast", "src", src));
  return launch(s, "cast", [=](CpuStream&) {
    parallel_chunks(n, kElemChunk, [&](int64_t lo, int64_t hi) {
      const size_t len = static_cast<size_t>(hi - lo);
      if (dst_dtype == src_dtype) {
        std::memmove(static_cast<char*>(dst) + lo * dtype_size(dst_dtype),
                     static_cast<const char*>(src) + lo * dtype_size(src_dtype),
                     len * dtype_size(src_dtype));
        return;
      }
      float* v = scratch(0, len);
      load_f32(src, src_dtype, lo, len, v);
      store_f32(v, dst, dst_dtype, lo, len);
    });
    return ok_status();
  });
}

Status CpuKernels::gelu_forward(Stream& s, void* out, const void* inp, int64_t n, DType dtype) {
  STRATA_RETURN_IF_ERROR(check_dtype("gelu_forward", dtype));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_positive("gelu_forward", "n", n));
  STRATA_RETURN_IF_ERROR(check_pointer("gelu_forward", "out", out));
  STRATA_RETURN_IF_ERROR(check_pointer("gelu_forward", "inp", inp));
  return launch(s, "gelu_forward", [=](CpuStream&) {
    parallel_chunks(n, kElemChunk, [&](int64_t lo, int64_t hi) {
      const size_t len = static_cast<size_t>(hi - lo);
      float* v = scratch(0, len);
      load_f32(inp, dtype, lo, len, v);
      for (size_t i = 0; i < len; ++i) v[i] = gelu_f(v[i]);
      store_f32(v, out, dtype, lo, len);
    });
    return ok_status();
  });
}

Status CpuKernels::gelu_backward(Stream& s, void* dinp, const void* inp, const void* dout,
                                 int64_t n, DType dtype) {
  STRATA_RETURN_IF_ERROR(check_dtype("gelu_backward", dtype));
  if (n == 0) return ok_status();
  STRATA_RETURN_IF_ERROR(check_positive("gelu_backward", "n", n));
  STRATA_RETURN_IF_ERROR(check_pointer("gelu_backward", "dinp", dinp));
  STRATA_RETURN_IF_ERROR(check_pointer("gelu_backward", "inp", inp));
  STRATA_RETURN_IF_ERROR(check_pointer("gelu_backward", "dout", dout));
  return launch(s, "gelu_backward", [=](CpuStream&) {
    map2_in_fp32(dinp, dtype, inp, dtype, dout, dtype, n,
                 [](float x, float g) { return gelu_grad_f(x) * g; });
    return ok_status();
  });
}

Status CpuKernels::sum_squares(Stream& s, float* out, const void* x, int64_t n, DType dtype,
                               bool accumulate) {
  STRATA_RETURN_IF_ERROR(check_dtype("sum_squares", dtype));
  STRATA_RETURN_IF_ERROR(check_pointer("sum_squares", "out", out));
  if (n < 0) return make_error(ErrorCode::kConfig, "sum_squares: n = ", n, " must be >= 0");
  if (n > 0) STRATA_RETURN_IF_ERROR(check_pointer("sum_squares", "x", x));
  return launch(s, "sum_squares", [=](CpuStream& cs) {
    constexpr int64_t kChunk = 16384;
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    // Per-chunk partials (fp32 sums of fp32 squares, in element order), then combined in chunk
    // order: the same bits for any thread count.
    float* partial = cs.scratch(0, static_cast<size_t>(2 * chunks));
    parallel_chunks(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t lo = c * kChunk;
        const size_t len = static_cast<size_t>(std::min(n, lo + kChunk) - lo);
        float* v = scratch(0, len);
        load_f32(x, dtype, lo, len, v);
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        bool bad = false;
        size_t i = 0;
        for (; i + 8 <= len; i += 8) {
          for (int j = 0; j < 8; ++j) acc[j] += v[i + j] * v[i + j];
        }
        for (; i < len; ++i) acc[0] += v[i] * v[i];
        for (size_t j = 0; j < len; ++j) bad |= !std::isfinite(v[j]);
        partial[2 * c] =
            ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        partial[2 * c + 1] = bad ? 1.0f : 0.0f;
      }
    });
    float sum = 0.0f;
    float flag = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      sum += partial[2 * c];
      flag = std::max(flag, partial[2 * c + 1]);
    }
    if (accumulate) {
      out[0] += sum;
      out[1] = std::max(out[1], flag);
    } else {
      out[0] = sum;
      out[1] = flag;
    }
    return ok_status();
  });
}

Status CpuKernels::grad_stats(Stream& s, double* out, const void* x, int64_t n, DType dtype) {
  STRATA_RETURN_IF_ERROR(check_dtype("grad_stats", dtype));
  STRATA_RETURN_IF_ERROR(check_pointer("grad_stats", "out", out));
  if (n < 0) return make_error(ErrorCode::kConfig, "grad_stats: n = ", n, " must be >= 0");
  if (n > 0) STRATA_RETURN_IF_ERROR(check_pointer("grad_stats", "x", x));
  return launch(s, "grad_stats", [=](CpuStream&) {
    // The device is host memory: the host check itself.
    const cpu::GradStats g = cpu::grad_check(x, dtype, n);
    out[0] = g.sum_squares;
    out[1] = g.has_nonfinite ? 1.0 : 0.0;
    return ok_status();
  });
}

}  // namespace strata::gpu

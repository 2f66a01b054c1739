// Float64 references of RMSNorm, rotary embeddings and SwiGLU (kernel_reference.h), from their
// definitions: Hugging Face's LlamaRMSNorm, rotate-half RoPE and LlamaMLP's act(gate) * up.
#include <cmath>

#include "kernel_reference.h"

namespace strata::gpu::ref {

void rmsnorm_forward(const Vec& x, const Vec& w, int64_t N, int64_t C, double eps, Vec& out,
                     Vec& rstd) {
  out.assign(static_cast<size_t>(N * C), 0.0);
  rstd.assign(static_cast<size_t>(N), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    double ms = 0.0;
    for (int64_t i = 0; i < C; ++i) ms += x[r * C + i] * x[r * C + i];
    const double s = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
    for (int64_t i = 0; i < C; ++i) out[r * C + i] = x[r * C + i] * s * w[i];
    rstd[r] = s;
  }
}

// y_i = w_i x_i s, s = (sum_j x_j^2 / C + eps)^(-1/2), ds/dx_j = -s^3 x_j / C, so
// dx_j = s w_j g_j - s^3 x_j / C * sum_i g_i w_i x_i and dw_i = sum over rows of g_i x_i s.
void rmsnorm_backward(const Vec& dout, const Vec& x, const Vec& w, int64_t N, int64_t C, double eps,
                      Vec& dx, Vec& dw) {
  for (int64_t r = 0; r < N; ++r) {
    const double* xr = &x[static_cast<size_t>(r * C)];
    const double* g = &dout[static_cast<size_t>(r * C)];
    double ms = 0.0, gwx = 0.0;
    for (int64_t i = 0; i < C; ++i) {
      ms += xr[i] * xr[i];
      gwx += g[i] * w[i] * xr[i];
    }
    const double s = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
    for (int64_t j = 0; j < C; ++j) {
      dx[r * C + j] += s * w[j] * g[j] - s * s * s * xr[j] / static_cast<double>(C) * gwx;
      dw[j] += g[j] * xr[j] * s;
    }
  }
}

void rope(Vec& x, const Vec& inv_freq, int64_t B, int64_t T, int64_t heads, int64_t HS,
          int64_t stride, double sign) {
  const int64_t half = HS / 2;
  for (int64_t r = 0; r < B * T; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      double* q = &x[static_cast<size_t>(r * stride + h * HS)];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(r % T) * inv_freq[i];
        const double c = std::cos(angle), s = sign * std::sin(angle);
        const double a = q[i], b = q[i + half];
        q[i] = a * c - b * s;  // x * cos + rotate_half(x) * sin, rotate_half = (-b, a)
        q[i + half] = b * c + a * s;
      }
    }
  }
}

namespace {
double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }
}  // namespace

void swiglu_forward(const Vec& gate_up, int64_t N, int64_t H, Vec& out) {
  out.assign(static_cast<size_t>(N * H), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t i = 0; i < H; ++i) {
      const double a = gate_up[r * 2 * H + i], up = gate_up[r * 2 * H + H + i];
      out[r * H + i] = a * sigmoid(a) * up;
    }
  }
}

void swiglu_backward(const Vec& dout, const Vec& gate_up, int64_t N, int64_t H, Vec& dgate_up) {
  dgate_up.assign(static_cast<size_t>(N * 2 * H), 0.0);
  for (int64_t r = 0; r < N; ++r) {
    for (int64_t i = 0; i < H; ++i) {
      const double a = gate_up[r * 2 * H + i], up = gate_up[r * 2 * H + H + i];
      const double g = dout[r * H + i], s = sigmoid(a);
      dgate_up[r * 2 * H + i] = g * up * (s + a * s * (1.0 - s));  // d(a s(a))/da
      dgate_up[r * 2 * H + H + i] = g * a * s;
    }
  }
}

}  // namespace strata::gpu::ref

#include "kernel_reference.h"

#include <algorithm>
#include <cmath>

namespace strata::gpu::ref {

void matmul(const Vec& a, const Vec& b, Vec& c, const Vec& bias, int64_t M, int64_t N, int64_t K,
            bool trans_a, bool trans_b, double alpha, double beta) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < K; ++p) {
        const double av = trans_a ? a[p * M + i] : a[i * K + p];
        const double bv = trans_b ? b[j * K + p] : b[p * N + j];
        acc += av * bv;
      }
      double r = alpha * acc;
      if (beta != 0.0) r += beta * c[i * N + j];
      if (!bias.empty()) r += bias[j];
      c[i * N + j] = r;
    }
  }
}

void layernorm_forward(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C, double eps,
                       Vec& out, Vec& mean, Vec& rstd) {
  out.assign(N * C, 0.0);
  mean.assign(N, 0.0);
  rstd.assign(N, 0.0);
  for (int64_t r = 0; r < N; ++r) {
    double m = 0.0;
    for (int64_t i = 0; i < C; ++i) m += x[r * C + i];
    m /= C;
    double v = 0.0;
    for (int64_t i = 0; i < C; ++i) v += (x[r * C + i] - m) * (x[r * C + i] - m);
    v /= C;
    const double rs = 1.0 / std::sqrt(v + eps);
    for (int64_t i = 0; i < C; ++i) out[r * C + i] = (x[r * C + i] - m) * rs * w[i] + b[i];
    mean[r] = m;
    rstd[r] = rs;
  }
}

void layernorm_backward(const Vec& dout, const Vec& x, const Vec& w, int64_t N, int64_t C,
                        double eps, Vec& dx, Vec& dw, Vec& db) {
  Vec out, mean, rstd;
  layernorm_forward(x, w, w, N, C, eps, out, mean, rstd);
  for (int64_t r = 0; r < N; ++r) {
    // y_i = xhat_i w_i + b_i, xhat = (x - m) rstd. dxhat_i = dout_i w_i;
    // dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)).
    double a = 0.0, bsum = 0.0;
    for (int64_t i = 0; i < C; ++i) {
      const double xh = (x[r * C + i] - mean[r]) * rstd[r];
      const double dxh = dout[r * C + i] * w[i];
      a += dxh;
      bsum += dxh * xh;
      dw[i] += dout[r * C + i] * xh;
      db[i] += dout[r * C + i];
    }
    a /= C;
    bsum /= C;
    for (int64_t i = 0; i < C; ++i) {
      const double xh = (x[r * C + i] - mean[r]) * rstd[r];
      const double dxh = dout[r * C + i] * w[i];
      dx[r * C + i] += rstd[r] * (dxh - a - xh * bsum);
    }
  }
}

double gelu(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(s * (x + 0.044715 * x * x * x)));
}

double gelu_grad(double x) {
  const double s = std::sqrt(2.0 / M_PI);
  const double u = s * (x + 0.044715 * x * x * x);
  const double th = std::tanh(u);
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

namespace {
// qkv rows of C + 2 * NKV * HS: q (NH heads) | k (NKV heads) | v (NKV heads); query head h reads
// key/value head h / (NH / NKV).
struct Qkv {
  int64_t T, C, NH, NKV, HS;
  int64_t width() const { return C + 2 * NKV * HS; }
  int64_t kv_head(int64_t h) const { return h / (NH / NKV); }
  // Index of element i of row t of batch b: part 0 query head h, parts 1, 2 the k, v of h's
  // key/value head.
  int64_t at(int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) const {
    const int64_t col = part == 0 ? h * HS : C + (part - 1) * NKV * HS + kv_head(h) * HS;
    return (b * T + t) * width() + col + i;
  }
};

// Row t of the causal attention softmax of query head h: p[u] for u <= t, and its log-sum-exp.
double causal_softmax_row(const Vec& qkv, const Qkv& g, int64_t b, int64_t h, int64_t t, Vec& p) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(g.HS));
  double mx = -INFINITY;
  for (int64_t u = 0; u <= t; ++u) {
    double d = 0.0;
    for (int64_t i = 0; i < g.HS; ++i) d += qkv[g.at(b, t, 0, h, i)] * qkv[g.at(b, u, 1, h, i)];
    p[u] = d * scale;
    mx = std::max(mx, p[u]);
  }
  double z = 0.0;
  for (int64_t u = 0; u <= t; ++u) z += std::exp(p[u] - mx);
  for (int64_t u = 0; u <= t; ++u) p[u] = std::exp(p[u] - mx) / z;
  return mx + std::log(z);
}
}  // namespace

void attention_forward(const Vec& qkv, int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                       Vec& out, Vec& lse) {
  const Qkv g{T, C, NH, NKV, C / NH};
  out.assign(B * T * C, 0.0);
  lse.assign(B * NH * T, 0.0);
  Vec s(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        lse[(b * NH + h) * T + t] = causal_softmax_row(qkv, g, b, h, t, s);
        for (int64_t u = 0; u <= t; ++u) {
          for (int64_t i = 0; i < g.HS; ++i) {
            out[(b * T + t) * C + h * g.HS + i] += s[u] * qkv[g.at(b, u, 2, h, i)];
          }
        }
      }
    }
  }
}

void attention_backward(const Vec& dout, const Vec& qkv, int64_t B, int64_t T, int64_t C,
                        int64_t NH, int64_t NKV, Vec& dqkv) {
  const Qkv g{T, C, NH, NKV, C / NH};
  const int64_t HS = g.HS;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  dqkv.assign(B * T * g.width(), 0.0);
  Vec p(T), dp(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        // Softmax row t over u <= t, then dS = P (dP - sum_u P dP).
        causal_softmax_row(qkv, g, b, h, t, p);
        double pdp = 0.0;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0.0;
          for (int64_t i = 0; i < HS; ++i) {
            d += dout[(b * T + t) * C + h * HS + i] * qkv[g.at(b, u, 2, h, i)];
          }
          dp[u] = d;
          pdp += p[u] * d;
        }
        for (int64_t u = 0; u <= t; ++u) {
          const double ds = p[u] * (dp[u] - pdp) * scale;
          for (int64_t i = 0; i < HS; ++i) {
            const int64_t qi = g.at(b, t, 0, h, i);
            const int64_t ki = g.at(b, u, 1, h, i);
            const int64_t vi = g.at(b, u, 2, h, i);
            dqkv[qi] += ds * qkv[ki];
            dqkv[ki] += ds * qkv[qi];
            dqkv[vi] += p[u] * dout[(b * T + t) * C + h * HS + i];
          }
        }
      }
    }
  }
}

void embedding_forward(const std::vector<int32_t>& tokens, const Vec& wte, const Vec& wpe,
                       int64_t B, int64_t T, int64_t C, Vec& out) {
  out.assign(B * T * C, 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tok = tokens[b * T + t];
      for (int64_t i = 0; i < C; ++i) {
        out[(b * T + t) * C + i] = wte[tok * C + i] + wpe[t * C + i];
      }
    }
  }
}

void embedding_backward(const Vec& dout, const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                        int64_t C, Vec& dwte, Vec& dwpe) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t tok = tokens[b * T + t];
      for (int64_t i = 0; i < C; ++i) {
        dwte[tok * C + i] += dout[(b * T + t) * C + i];
        dwpe[t * C + i] += dout[(b * T + t) * C + i];
      }
    }
  }
}

void softmax_cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t N,
                           int64_t V, int64_t Vp, double dloss, Vec& losses, Vec& dlogits) {
  losses.assign(N, 0.0);
  dlogits.assign(N * Vp, 0.0);
  for (int64_t r = 0; r < N; ++r) {
    if (targets[r] < 0) continue;
    double mx = -INFINITY;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, logits[r * Vp + i]);
    double z = 0.0;
    for (int64_t i = 0; i < V; ++i) z += std::exp(logits[r * Vp + i] - mx);
    losses[r] = std::log(z) + mx - logits[r * Vp + targets[r]];
    for (int64_t i = 0; i < V; ++i) {
      const double p = std::exp(logits[r * Vp + i] - mx) / z;
      dlogits[r * Vp + i] = (p - (i == targets[r] ? 1.0 : 0.0)) * dloss;
    }
  }
}

}  // namespace strata::gpu::ref

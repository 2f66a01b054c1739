#include "llama_reference.h"

#include <cmath>

#include "model/llama_layout.h"

namespace strata::model::test {
namespace {

using Vec = std::vector<double>;

// y[r, :] = x[r, :] * rsqrt(mean(x[r]^2) + eps) * w
Vec rms(const Vec& x, const double* w, int64_t n, int64_t C, double eps) {
  Vec y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < C; ++i) ms += x[r * C + i] * x[r * C + i];
    const double s = 1.0 / std::sqrt(ms / static_cast<double>(C) + eps);
    for (int64_t i = 0; i < C; ++i) y[r * C + i] = x[r * C + i] * s * w[i];
  }
  return y;
}

// y[r, o] = sum_i x[r, i] * w[o, i] (nn.Linear, weight [out, in])
Vec lin(const Vec& x, const double* w, int64_t n, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(n * out), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * w[o * in + i];
      y[r * out + o] = acc;
    }
  }
  return y;
}

// q' = q cos + rotate_half(q) sin, rotate_half(x) = cat(-x2, x1), per head of HS.
void rope(Vec& x, int64_t B, int64_t T, int64_t heads, int64_t HS, const std::vector<float>& f) {
  const int64_t half = HS / 2;
  for (int64_t r = 0; r < B * T; ++r) {
    const auto t = static_cast<double>(r % T);
    for (int64_t h = 0; h < heads; ++h) {
      double* q = &x[static_cast<size_t>((r * heads + h) * HS)];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = t * static_cast<double>(f[static_cast<size_t>(i)]);
        const double a = q[i], b = q[i + half];
        q[i] = a * std::cos(angle) - b * std::sin(angle);
        q[i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
  }
}

}  // namespace

double llama_reference_loss(const LlamaConfig& c, const std::vector<std::vector<double>>& blocks,
                            const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                            int64_t B, int64_t T) {
  const int64_t C = c.channels, HS = c.head_size(), NH = c.heads, NKV = c.kv_heads;
  const int64_t I = c.intermediate, V = c.vocab, n = B * T;
  const std::vector<float> freq = c.inv_freq();
  auto tensor = [&](int64_t b, int index) {
    return blocks[static_cast<size_t>(b)].data() +
           llama_block_tensors(c, b)[static_cast<size_t>(index)].offset;
  };
  const double* embed = tensor(c.layers, 0);
  Vec x(static_cast<size_t>(n * C));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < C; ++i) x[r * C + i] = embed[tokens[r] * C + i];
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const Vec h1 = rms(x, tensor(l, 0), n, C, c.rms_eps);
    Vec q = lin(h1, tensor(l, 1), n, C, NH * HS);
    Vec k = lin(h1, tensor(l, 2), n, C, NKV * HS);
    const Vec v = lin(h1, tensor(l, 3), n, C, NKV * HS);
    rope(q, B, T, NH, HS, freq);
    rope(k, B, T, NKV, HS, freq);
    Vec att(static_cast<size_t>(n * C), 0.0);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < NH; ++h) {
        const int64_t kvh = h / (NH / NKV);  // repeat_kv
        for (int64_t t = 0; t < T; ++t) {
          Vec s(static_cast<size_t>(t + 1));
          double mx = -INFINITY;
          for (int64_t u = 0; u <= t; ++u) {
            double d = 0;
            for (int64_t i = 0; i < HS; ++i) {
              d += q[((b * T + t) * NH + h) * HS + i] * k[((b * T + u) * NKV + kvh) * HS + i];
            }
            s[u] = d / std::sqrt(static_cast<double>(HS));
            mx = std::max(mx, s[u]);
          }
          double z = 0;
          for (auto& e : s) z += (e = std::exp(e - mx));
          for (int64_t u = 0; u <= t; ++u) {
            for (int64_t i = 0; i < HS; ++i) {
              att[(b * T + t) * C + h * HS + i] += s[u] / z * v[((b * T + u) * NKV + kvh) * HS + i];
            }
          }
        }
      }
    }
    const Vec o = lin(att, tensor(l, 4), n, C, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Vec h2 = rms(x, tensor(l, 5), n, C, c.rms_eps);
    const Vec gate = lin(h2, tensor(l, 6), n, C, I);
    const Vec up = lin(h2, tensor(l, 7), n, C, I);
    Vec act(gate.size());
    for (size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    const Vec down = lin(act, tensor(l, 8), n, I, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  const Vec xf = rms(x, tensor(c.layers, 1), n, C, c.rms_eps);
  const Vec logits = lin(xf, c.tied ? embed : tensor(c.layers, 2), n, C, V);
  double sum = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (targets[r] < 0) continue;
    double mx = -INFINITY;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[r * V + j]);
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(logits[r * V + j] - mx);
    sum += std::log(z) + mx - logits[r * V + targets[r]];
    ++count;
  }
  return count > 0 ? sum / static_cast<double>(count) : 0.0;
}

}  // namespace strata::model::test

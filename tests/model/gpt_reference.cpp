#include "gpt_reference.h"

#include <cmath>

#include "model/param_layout.h"

namespace strata::model::testing {
namespace {

using Vec = std::vector<double>;

// out[n,C] = layernorm(x[n,C]) * w + b, biased variance, eps 1e-5.
Vec layernorm(const Vec& x, const double* w, const double* b, int64_t n, int64_t c) {
  Vec out(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < c; ++i) mean += x[r * c + i];
    mean /= static_cast<double>(c);
    for (int64_t i = 0; i < c; ++i) var += (x[r * c + i] - mean) * (x[r * c + i] - mean);
    var /= static_cast<double>(c);
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int64_t i = 0; i < c; ++i) out[r * c + i] = (x[r * c + i] - mean) * rstd * w[i] + b[i];
  }
  return out;
}

// out[n,OC] = x[n,IC] . w[OC,IC]^T + bias (bias may be null).
Vec linear(const Vec& x, const double* w, const double* bias, int64_t n, int64_t ic, int64_t oc) {
  Vec out(static_cast<size_t>(n * oc));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < oc; ++o) {
      double acc = bias != nullptr ? bias[o] : 0.0;
      for (int64_t i = 0; i < ic; ++i) acc += x[r * ic + i] * w[o * ic + i];
      out[r * oc + o] = acc;
    }
  }
  return out;
}

}  // namespace

double reference_loss(const GptConfig& config, const std::vector<std::vector<double>>& blocks,
                      const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                      int64_t batch, int64_t seq) {
  const int64_t c = config.channels, nh = config.heads, hs = c / nh, n = batch * seq;
  const LayerLayout ll = layer_layout(config);
  const SharedLayout sl = shared_layout(config);
  const double* sh = blocks[static_cast<size_t>(config.layers)].data();
  Vec x(static_cast<size_t>(n * c));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const int64_t tok = tokens[static_cast<size_t>(b * seq + t)];
      for (int64_t i = 0; i < c; ++i) {
        x[(b * seq + t) * c + i] = sh[sl.wte + tok * c + i] + sh[sl.wpe + t * c + i];
      }
    }
  }
  for (int64_t l = 0; l < config.layers; ++l) {
    const double* p = blocks[static_cast<size_t>(l)].data();
    const Vec ln1 = layernorm(x, p + ll.ln1w, p + ll.ln1b, n, c);
    const Vec qkv = linear(ln1, p + ll.qkvw, p + ll.qkvb, n, c, 3 * c);
    Vec att(static_cast<size_t>(n * c), 0.0);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < nh; ++h) {
        for (int64_t t = 0; t < seq; ++t) {
          const double* q = &qkv[(b * seq + t) * 3 * c + h * hs];
          std::vector<double> score(static_cast<size_t>(t + 1));
          double mx = -1e300;
          for (int64_t u = 0; u <= t; ++u) {
            const double* k = &qkv[(b * seq + u) * 3 * c + c + h * hs];
            double dot = 0.0;
            for (int64_t i = 0; i < hs; ++i) dot += q[i] * k[i];
            score[static_cast<size_t>(u)] = dot / std::sqrt(static_cast<double>(hs));
            mx = std::max(mx, score[static_cast<size_t>(u)]);
          }
          double z = 0.0;
          for (auto& s : score) z += (s = std::exp(s - mx));
          for (int64_t u = 0; u <= t; ++u) {
            const double* v = &qkv[(b * seq + u) * 3 * c + 2 * c + h * hs];
            for (int64_t i = 0; i < hs; ++i) {
              att[(b * seq + t) * c + h * hs + i] += score[static_cast<size_t>(u)] / z * v[i];
            }
          }
        }
      }
    }
    const Vec proj = linear(att, p + ll.attprojw, p + ll.attprojb, n, c, c);
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    const Vec ln2 = layernorm(x, p + ll.ln2w, p + ll.ln2b, n, c);
    Vec fc = linear(ln2, p + ll.fcw, p + ll.fcb, n, c, 4 * c);
    for (auto& v : fc) {
      v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    const Vec out = linear(fc, p + ll.fcprojw, p + ll.fcprojb, n, 4 * c, c);
    for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
  }
  const Vec lnf = layernorm(x, sh + sl.lnfw, sh + sl.lnfb, n, c);
  const Vec logits = linear(lnf, sh + sl.wte, nullptr, n, c, config.vocab);  // first V rows
  double total = 0.0;
  int64_t valid = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int32_t tgt = targets[static_cast<size_t>(r)];
    if (tgt < 0) continue;
    const double* row = &logits[r * config.vocab];
    double mx = -1e300;
    for (int64_t v = 0; v < config.vocab; ++v) mx = std::max(mx, row[v]);
    double z = 0.0;
    for (int64_t v = 0; v < config.vocab; ++v) z += std::exp(row[v] - mx);
    total += -(row[tgt] - mx - std::log(z));
    ++valid;
  }
  return valid > 0 ? total / static_cast<double>(valid) : 0.0;
}

}  // namespace strata::model::testing

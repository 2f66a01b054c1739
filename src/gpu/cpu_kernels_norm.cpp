// CpuKernels: layernorm, embedding and softmax cross-entropy (forward and backward).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "gpu/cpu_device_impl.h"
#include "gpu/cpu_kernels.h"
#include "gpu/cpu_stream.h"

namespace strata::gpu {

using namespace cpu_detail;

namespace {
constexpr int64_t kRowGrain = 16;  // rows per task in row-parallel ops
constexpr int64_t kColBlock = 64;  // columns per task in column-parallel reductions
}  // namespace

Status CpuKernels::layernorm_forward(Stream& s, void* out, float* mean, float* rstd,
                                     const void* inp, const void* weight, const void* bias,
                                     int64_t N, int64_t C, float eps, DType dtype) {
  const char* op = "layernorm_forward";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "N", N));
  STRATA_RETURN_IF_ERROR(check_positive(op, "C", C));
  for (auto [name, p] : {std::pair<const char*, const void*>{"out", out},
                         {"mean", mean},
                         {"rstd", rstd},
                         {"inp", inp},
                         {"weight", weight},
                         {"bias", bias}}) {
    STRATA_RETURN_IF_ERROR(check_pointer(op, name, p));
  }
  return launch(s, op, [=](CpuStream&) {
    parallel_chunks(N, kRowGrain, [&](int64_t r0, int64_t r1) {
      const size_t c = static_cast<size_t>(C);
      float* x = scratch(0, c);
      float* w = scratch(1, c);
      float* b = scratch(2, c);
      load_f32(weight, dtype, 0, c, w);
      load_f32(bias, dtype, 0, c, b);
      for (int64_t r = r0; r < r1; ++r) {
        load_f32(inp, dtype, static_cast<size_t>(r) * c, c, x);
        float sum = 0.0f;
        for (size_t i = 0; i < c; ++i) sum += x[i];
        const float m = sum / static_cast<float>(C);
        float var = 0.0f;
        for (size_t i = 0; i < c; ++i) {
          const float d = x[i] - m;
          var += d * d;
        }
        const float rs = 1.0f / std::sqrt(var / static_cast<float>(C) + eps);
        for (size_t i = 0; i < c; ++i) x[i] = (x[i] - m) * rs * w[i] + b[i];
        store_f32(x, out, dtype, static_cast<size_t>(r) * c, c);
        mean[r] = m;
        rstd[r] = rs;
      }
    });
    return ok_status();
  });
}

Status CpuKernels::layernorm_backward(Stream& s, void* dinp, void* dweight, void* dbias,
                                      const void* dout, const void* inp, const void* weight,
                                      const float* mean, const float* rstd, int64_t N, int64_t C,
                                      DType dtype) {
  const char* op = "layernorm_backward";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "N", N));
  STRATA_RETURN_IF_ERROR(check_positive(op, "C", C));
  for (auto [name, p] : {std::pair<const char*, const void*>{"dinp", dinp},
                         {"dweight", dweight},
                         {"dbias", dbias},
                         {"dout", dout},
                         {"inp", inp},
                         {"weight", weight},
                         {"mean", mean},
                         {"rstd", rstd}}) {
    STRATA_RETURN_IF_ERROR(check_pointer(op, name, p));
  }
  return launch(s, op, [=](CpuStream&) {
    const size_t c = static_cast<size_t>(C);
    // dinp: rows in parallel.
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
        const float m = mean[r], rs = rstd[r];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (size_t i = 0; i < c; ++i) {
          const float norm = (x[i] - m) * rs;
          const float dnorm = w[i] * g[i];
          dnorm_mean += dnorm;
          dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= static_cast<float>(C);
        dnorm_norm_mean /= static_cast<float>(C);
        for (size_t i = 0; i < c; ++i) {
          const float norm = (x[i] - m) * rs;
          const float dnorm = w[i] * g[i];
          d[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
        }
        store_f32(d, dinp, dtype, off, c);
      }
    });
    // dweight, dbias: each task owns a column block and walks the rows in order.
    parallel_chunks(C, kColBlock, [&](int64_t j0, int64_t j1) {
      const size_t w = static_cast<size_t>(j1 - j0);
      float dw[kColBlock] = {};
      float db[kColBlock] = {};
      float* x = scratch(0, w);
      float* g = scratch(1, w);
      for (int64_t r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * c + static_cast<size_t>(j0);
        load_f32(inp, dtype, off, w, x);
        load_f32(dout, dtype, off, w, g);
        const float m = mean[r], rs = rstd[r];
        for (size_t i = 0; i < w; ++i) {
          dw[i] += (x[i] - m) * rs * g[i];
          db[i] += g[i];
        }
      }
      float* prev = scratch(2, w);
      load_f32(dweight, dtype, static_cast<size_t>(j0), w, prev);
      for (size_t i = 0; i < w; ++i) prev[i] += dw[i];
      store_f32(prev, dweight, dtype, static_cast<size_t>(j0), w);
      load_f32(dbias, dtype, static_cast<size_t>(j0), w, prev);
      for (size_t i = 0; i < w; ++i) prev[i] += db[i];
      store_f32(prev, dbias, dtype, static_cast<size_t>(j0), w);
    });
    return ok_status();
  });
}

Status CpuKernels::embedding_forward(Stream& s, void* out, const int32_t* tokens, const void* wte,
                                     const void* wpe, int64_t B, int64_t T, int64_t C,
                                     DType dtype) {
  const char* op = "embedding_forward";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "B", B));
  STRATA_RETURN_IF_ERROR(check_positive(op, "T", T));
  STRATA_RETURN_IF_ERROR(check_positive(op, "C", C));
  for (auto [name, p] : {std::pair<const char*, const void*>{"out", out},
                         {"tokens", tokens},
                         {"wte", wte},
                         {"wpe", wpe}}) {
    STRATA_RETURN_IF_ERROR(check_pointer(op, name, p));
  }
  return launch(s, op, [=](CpuStream&) -> Status {
    const size_t c = static_cast<size_t>(C);
    std::atomic<bool> bad{false};
    parallel_chunks(B * T, kRowGrain, [&](int64_t r0, int64_t r1) {
      float* e = scratch(0, c);
      float* p = scratch(1, c);
      for (int64_t r = r0; r < r1; ++r) {
        const int32_t tok = tokens[r];
        if (tok < 0) {
          bad.store(true, std::memory_order_relaxed);
          continue;
        }
        load_f32(wte, dtype, static_cast<size_t>(tok) * c, c, e);
        load_f32(wpe, dtype, static_cast<size_t>(r % T) * c, c, p);
        for (size_t i = 0; i < c; ++i) e[i] += p[i];
        store_f32(e, out, dtype, static_cast<size_t>(r) * c, c);
      }
    });
    if (bad.load()) return make_error(ErrorCode::kConfig, op, ": a token id is negative");
    return ok_status();
  });
}

Status CpuKernels::embedding_backward(Stream& s, void* dwte, void* dwpe, const void* dout,
                                      const int32_t* tokens, int64_t B, int64_t T, int64_t C,
                                      DType dtype) {
  const char* op = "embedding_backward";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "B", B));
  STRATA_RETURN_IF_ERROR(check_positive(op, "T", T));
  STRATA_RETURN_IF_ERROR(check_positive(op, "C", C));
  for (auto [name, p] : {std::pair<const char*, const void*>{"dwte", dwte},
                         {"dwpe", dwpe},
                         {"dout", dout},
                         {"tokens", tokens}}) {
    STRATA_RETURN_IF_ERROR(check_pointer(op, name, p));
  }
  return launch(s, op, [=](CpuStream&) -> Status {
    const size_t c = static_cast<size_t>(C);
    const int64_t BT = B * T;
    // dwpe: each t owns its row; sum over b in order.
    parallel_chunks(T, kRowGrain, [&](int64_t t0, int64_t t1) {
      float* acc = scratch(0, c);
      float* g = scratch(1, c);
      for (int64_t t = t0; t < t1; ++t) {
        load_f32(dwpe, dtype, static_cast<size_t>(t) * c, c, acc);
        for (int64_t b = 0; b < B; ++b) {
          load_f32(dout, dtype, static_cast<size_t>(b * T + t) * c, c, g);
          for (size_t i = 0; i < c; ++i) acc[i] += g[i];
        }
        store_f32(acc, dwpe, dtype, static_cast<size_t>(t) * c, c);
      }
    });
    // dwte: sort positions by token (stable, so each token's positions stay in (b,t) order),
    // then each distinct token's row is owned by one task: sum its positions in fp32, add once.
    std::vector<int64_t> order(static_cast<size_t>(BT));
    for (int64_t i = 0; i < BT; ++i) order[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < BT; ++i) {
      if (tokens[i] < 0) return make_error(ErrorCode::kConfig, op, ": a token id is negative");
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return tokens[x] < tokens[y]; });
    std::vector<int64_t> starts;
    for (int64_t i = 0; i < BT; ++i) {
      if (i == 0 ||
          tokens[order[static_cast<size_t>(i)]] != tokens[order[static_cast<size_t>(i - 1)]]) {
        starts.push_back(i);
      }
    }
    starts.push_back(BT);
    const int64_t groups = static_cast<int64_t>(starts.size()) - 1;
    parallel_chunks(groups, 4, [&](int64_t g0, int64_t g1) {
      float* acc = scratch(0, c);
      float* g = scratch(1, c);
      for (int64_t gi = g0; gi < g1; ++gi) {
        const int64_t first = starts[static_cast<size_t>(gi)];
        const int64_t last = starts[static_cast<size_t>(gi + 1)];
        const size_t row = static_cast<size_t>(tokens[order[static_cast<size_t>(first)]]) * c;
        std::fill(acc, acc + c, 0.0f);
        for (int64_t i = first; i < last; ++i) {
          load_f32(dout, dtype, static_cast<size_t>(order[static_cast<size_t>(i)]) * c, c, g);
          for (size_t k = 0; k < c; ++k) acc[k] += g[k];
        }
        load_f32(dwte, dtype, row, c, g);
        for (size_t k = 0; k < c; ++k) g[k] += acc[k];
        store_f32(g, dwte, dtype, row, c);
      }
    });
    return ok_status();
  });
}

Status CpuKernels::softmax_cross_entropy(Stream& s, float* losses, void* logits,
                                         const int32_t* targets, int64_t N, int64_t V, int64_t Vp,
                                         float dloss, DType dtype) {
  const char* op = "softmax_cross_entropy";
  STRATA_RETURN_IF_ERROR(check_dtype(op, dtype));
  STRATA_RETURN_IF_ERROR(check_positive(op, "N", N));
  STRATA_RETURN_IF_ERROR(check_positive(op, "V", V));
  if (Vp < V) {
    return make_error(ErrorCode::kConfig, op, ": Vp = ", Vp, " must be >= V = ", V);
  }
  for (auto [name, p] : {std::pair<const char*, const void*>{"losses", losses},
                         {"logits", logits},
                         {"targets", targets}}) {
    STRATA_RETURN_IF_ERROR(check_pointer(op, name, p));
  }
  return launch(s, op, [=](CpuStream&) -> Status {
    std::atomic<bool> bad{false};
    const size_t vp = static_cast<size_t>(Vp);
    const size_t v = static_cast<size_t>(V);
    parallel_chunks(N, 4, [&](int64_t r0, int64_t r1) {
      float* x = scratch(0, vp);
      for (int64_t r = r0; r < r1; ++r) {
        const size_t off = static_cast<size_t>(r) * vp;
        const int32_t target = targets[r];
        if (target < 0 || target >= V) {
          if (target >= V) bad.store(true, std::memory_order_relaxed);
          losses[r] = 0.0f;
          std::fill(x, x + vp, 0.0f);
          store_f32(x, logits, dtype, off, vp);
          continue;
        }
        load_f32(logits, dtype, off, v, x);
        const float target_logit = x[static_cast<size_t>(target)];
        float mx = x[0];
        for (size_t i = 1; i < v; ++i) mx = std::max(mx, x[i]);
        float sum = 0.0f;
        for (size_t i = 0; i < v; ++i) {
          x[i] = std::exp(x[i] - mx);
          sum += x[i];
        }
        const float inv = 1.0f / sum;
        // -log p[target] = log(sum exp(x - max)) - (x[target] - max).
        losses[r] = std::log(sum) - (target_logit - mx);
        for (size_t i = 0; i < v; ++i) {
          const float p = x[i] * inv;
          x[i] = (p - (i == static_cast<size_t>(target) ? 1.0f : 0.0f)) * dloss;
        }
        std::fill(x + v, x + vp, 0.0f);
        store_f32(x, logits, dtype, off, vp);
      }
    });
    if (bad.load()) return make_error(ErrorCode::kConfig, op, ": a target id is >= V = ", V);
    return ok_status();
  });
}

}  // namespace strata::gpu

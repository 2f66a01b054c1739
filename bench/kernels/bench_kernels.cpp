// bench_kernels: each kernel of a GPT-2 step by itself, at the shapes of GPT-2 124M (C 768, 12
// heads) and of a 1.5B model (C 1600, 25 heads), vocabulary 50257 (padded to 50304): one layer's
// forward and backward, the head and the loss, the embedding, a layer's Adam and its gradient
// norm. Per kernel: the median time of several repeats after a warm-up, its FLOPs and the bytes
// it must move at least (each input read once, each output written once: the counts below,
// stated with each kernel), the achieved TFLOP/s and GB/s, and the fraction of its roofline:
// max(FLOPs / the datasheet's dense peak, bytes / the datasheet's memory bandwidth) over the time
// (gpu/peak_flops.h; --peak-flops and --peak-bandwidth override). On the CpuDevice there is no
// datasheet: the roofline columns are empty and the table is a smoke test of the harness (the
// shapes are cut: B 1, T 256, or 64 with --quick).
//
// Counts, with N = B·T rows, e bytes per element of the dtype, H = NH heads of HS:
//   matmul [M,K]x[K,N']   2·M·K·N' FLOPs; (M·K + K·N' + M·N') e bytes (+ N' e for a bias)
//   attention forward     2·B·T²·C FLOPs (the causal half of QKᵀ and PV); (4·N·C) e + 4·B·H·T
//   attention backward    5·B·T²·C FLOPs (five matmuls, causal half); (8·N·C) e + 4·B·H·T
//   layernorm forward     (2·N·C + 2·C) e + 8·N (mean, rstd)
//   layernorm backward    (4·N·C + C) e + 8·N + 4·C e (dinp read and written, dweight, dbias)
//   gelu forward/backward 2·n e / 3·n e; add 3·n e; bias_backward (M·N' + N') e
//   matmul + GELU epilogue the matmul's, + M·N' e (the pre-activation written, or read)
//   residual + layernorm  (4·N·C + 2·C) e + 8·N (a, b read; the residual and the output written)
//   softmax+cross-entropy 2·N·Vp e + 8·N (logits read, gradient written, targets, losses)
//   embedding fwd / bwd   (2·N·C) e + 4·N (+ the wpe rows) / (2·N·C + 2·T·C) e + 4·N
//   adam                  (24 + 2e) bytes per element (fp32 p, m, v read and written; grad; out)
//   sum_squares           n e
// Prints the table and one final JSON line.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "cpu/cpu_adam.h"
#include "gpu/device.h"
#include "gpu/kernels.h"
#include "gpu/peak_flops.h"

namespace strata {
namespace {

STRATA_BENCH_CHECKS("bench_kernels")

struct Shape {
  std::string name;
  int64_t B = 8, T = 1024, C = 768, NH = 12, V = 50257, Vp = 50304;
  int64_t N() const { return B * T; }
};

struct Measured {
  std::string kernel, dims;
  double flops = 0.0, bytes = 0.0, seconds = 0.0;
};

// Device buffers for one shape, filled once with small values of varied sign (no NaN, no
// denormal): every kernel reads and writes these.
struct Buffers {
  gpu::DeviceBuffer x, y, z, w, dw, logits, wte, dwte, tokens, lse, stats, f32a, f32b, f32c, out;
};

gpu::DeviceBuffer filled(gpu::Device& dev, gpu::Stream& s, size_t elements, DType dt) {
  gpu::DeviceBuffer b = check(dev.allocate(std::max<size_t>(elements, 1) * dtype_size(dt)));
  std::vector<float> host(std::min<size_t>(elements, size_t{1} << 22));
  for (size_t i = 0; i < host.size(); ++i) {
    host[i] = 0.02f * (static_cast<float>((i * 2654435761u >> 13) % 1024) / 512.0f - 1.0f);
  }
  std::vector<std::byte> bytes(host.size() * dtype_size(dt));
  convert(host.data(), DType::kF32, bytes.data(), dt, static_cast<int64_t>(host.size()));
  for (size_t at = 0; at < elements; at += host.size()) {
    const size_t n = std::min(host.size(), elements - at);
    check(s.copy_now(static_cast<std::byte*>(b.data()) + at * dtype_size(dt), bytes.data(),
                     n * dtype_size(dt), gpu::CopyKind::kHostToDevice));
  }
  return b;
}

// Median seconds of one call of `fn` (each repeat runs it `inner` times, then synchronizes).
double time_kernel(gpu::Stream& s, int repeats, int inner, const std::function<Status()>& fn) {
  check(fn());  // warm-up
  check(s.synchronize());
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = bench::Clock::now();
    for (int i = 0; i < inner; ++i) check(fn());
    check(s.synchronize());
    t.push_back(bench::seconds_since(t0) / inner);
  }
  return bench::median(t);
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string out;
  for (int64_t v : d) out += (out.empty() ? "" : "x") + std::to_string(v);
  return out;
}

std::vector<Measured> run_shape(gpu::Device& dev, gpu::Stream& s, const Shape& sh, DType dt,
                                int repeats, int inner) {
  gpu::Kernels& k = dev.kernels();
  const int64_t N = sh.N(), C = sh.C, B = sh.B, T = sh.T, NH = sh.NH, Vp = sh.Vp;
  const double e = static_cast<double>(dtype_size(dt));
  const auto n = static_cast<size_t>(N);
  Buffers b;
  b.x = filled(dev, s, n * 4 * size_t(C), dt);
  b.y = filled(dev, s, n * 4 * size_t(C), dt);
  b.z = filled(dev, s, n * 4 * size_t(C), dt);
  b.out = filled(dev, s, n * 4 * size_t(C), dt);
  b.w = filled(dev, s, size_t(4 * C * C), dt);
  b.dw = filled(dev, s, size_t(4 * C * C), dt);
  b.logits = filled(dev, s, n * size_t(Vp), dt);
  b.wte = filled(dev, s, size_t(Vp * C), dt);
  b.dwte = filled(dev, s, size_t(Vp * C), dt);
  b.lse = filled(dev, s, size_t(B * NH * T), DType::kF32);
  b.stats = filled(dev, s, n * 2, DType::kF32);
  // A layer's parameters for the optimizer: 12C² + 13C elements.
  const int64_t P = 12 * C * C + 13 * C;
  b.f32a = filled(dev, s, size_t(P), DType::kF32);
  b.f32b = filled(dev, s, size_t(P), DType::kF32);
  b.f32c = filled(dev, s, size_t(P), DType::kF32);
  std::vector<int32_t> tok(n);
  for (size_t i = 0; i < n; ++i) tok[i] = static_cast<int32_t>((i * 7919) % size_t(sh.V));
  b.tokens = check(dev.allocate(n * sizeof(int32_t)));
  check(s.copy_now(b.tokens.data(), tok.data(), n * sizeof(int32_t), gpu::CopyKind::kHostToDevice));
  auto* tokens = static_cast<const int32_t*>(b.tokens.data());
  auto* mean = static_cast<float*>(b.stats.data());
  float* rstd = mean + N;
  std::vector<Measured> out;
  auto add = [&](std::string name, std::string d, double flops, double bytes,
                 const std::function<Status()>& fn) {
    out.push_back(
        {std::move(name), std::move(d), flops, bytes, time_kernel(s, repeats, inner, fn)});
  };
  // A linear layer's three matmuls, x[N,in] -> y[N,out] with weights w[out,in] (llm.c's layout):
  // forward (with its bias), the input's gradient (into z), the weight's (added into dw); and the
  // bias gradient.
  // Its forward's arguments: y[N,out] = x[N,in] w[out,in]^T (+ the bias in dw).
  auto forward_args = [&](int64_t in, int64_t outc, void* w, void* y, bool bias) {
    gpu::MatmulArgs f;
    f.a = b.x.data();
    f.b = w;
    f.c = y;
    f.bias = bias ? b.dw.data() : nullptr;
    f.dtype_ab = f.dtype_c = dt;
    f.m = N;
    f.n = outc;
    f.k = in;
    f.trans_b = true;
    return f;
  };
  auto linear = [&](const std::string& name, int64_t in, int64_t outc, void* w, void* y, void* dw,
                    bool bias) {
    const double mm = 2.0 * double(N) * double(in) * double(outc);
    const double io = double(N * in + in * outc + N * outc) * e;
    const gpu::MatmulArgs f = forward_args(in, outc, w, y, bias);
    add("matmul " + name + " forward", dims({N, in, outc}), mm,
        io + (bias ? double(outc) * e : 0.0), [&, f] { return k.matmul(s, f); });
    gpu::MatmulArgs dx = f;  // dinp[N,in] = dout[N,out] w[out,in]
    dx.a = y;
    dx.c = b.z.data();
    dx.bias = nullptr;
    dx.n = in;
    dx.k = outc;
    dx.trans_b = false;
    add("matmul " + name + " dinp", dims({N, outc, in}), mm, io,
        [&, dx] { return k.matmul(s, dx); });
    gpu::MatmulArgs dwt = f;  // dw[out,in] += dout[N,out]^T inp[N,in]
    dwt.a = y;
    dwt.b = b.x.data();
    dwt.c = dw;
    dwt.bias = nullptr;
    dwt.m = outc;
    dwt.n = in;
    dwt.k = N;
    dwt.trans_a = true;
    dwt.trans_b = false;
    dwt.beta = 1.0f;
    add("matmul " + name + " dweight", dims({outc, N, in}), mm, io + double(in * outc) * e,
        [&, dwt] { return k.matmul(s, dwt); });
    if (!bias) return;
    add("bias_backward " + name, dims({N, outc}), 0.0, double(N * outc + outc) * e,
        [&, y, outc] { return k.bias_backward(s, b.w.data(), y, N, outc, dt, true); });
  };
  auto layer_linear = [&](const std::string& name, int64_t in, int64_t outc) {
    linear(name, in, outc, b.w.data(), b.y.data(), b.dw.data(), true);
  };
  const double nc = double(N * C);
  // The layer's forward, in its order; then the backward of its own kernels.
  add("layernorm forward", dims({N, C}), 0.0, (2 * nc + 2 * double(C)) * e + 8.0 * double(N), [&] {
    return k.layernorm_forward(s, b.z.data(), mean, rstd, b.x.data(), b.w.data(), b.dw.data(), N, C,
                               1e-5f, dt);
  });
  layer_linear("qkv", C, 3 * C);
  const double attn = 2.0 * double(B) * double(T) * double(T) * double(C);
  const double lse_bytes = 4.0 * double(B * NH * T);
  add("attention forward", dims({B, T, C, NH}), attn, 4 * nc * e + lse_bytes, [&] {
    return k.attention_forward(s, b.z.data(), static_cast<float*>(b.lse.data()), b.x.data(), B, T,
                               C, NH, NH, dt);
  });
  add("attention backward", dims({B, T, C, NH}), 2.5 * attn, 8 * nc * e + lse_bytes, [&] {
    return k.attention_backward(s, b.y.data(), b.out.data(), b.x.data(), b.z.data(),
                                static_cast<const float*>(b.lse.data()), B, T, C, NH, NH, dt);
  });
  layer_linear("attention proj", C, C);
  add("add (residual)", dims({N, C}), 0.0, 3 * nc * e,
      [&] { return k.add(s, b.z.data(), b.x.data(), b.y.data(), N * C, dt); });
  add("residual + layernorm (fused)", dims({N, C}), 0.0,
      (4 * nc + 2 * double(C)) * e + 8.0 * double(N), [&] {
        return k.residual_layernorm_forward(s, b.out.data(), b.z.data(), mean, rstd, b.x.data(),
                                            b.y.data(), b.w.data(), b.dw.data(), N, C, 1e-5f, dt);
      });
  layer_linear("fc", C, 4 * C);
  add("gelu forward", dims({N, 4 * C}), 0.0, 2 * 4 * nc * e,
      [&] { return k.gelu_forward(s, b.z.data(), b.x.data(), 4 * N * C, dt); });
  add("gelu backward", dims({N, 4 * C}), 0.0, 3 * 4 * nc * e,
      [&] { return k.gelu_backward(s, b.z.data(), b.x.data(), b.y.data(), 4 * N * C, dt); });
  layer_linear("fc proj", 4 * C, C);
  // The same two steps fused into the matmuls (cuBLASLt's GELU epilogues; on the CpuDevice the
  // sequence): fc forward with the GELU (the pre-activation kept in z), fc proj's dinp with the
  // GELU's backward (at the pre-activation x).
  {
    const double mm = 2.0 * double(N) * double(C) * double(4 * C);
    const double io = (double(N * C + 4 * C * C) + 2.0 * 4 * nc) * e;
    gpu::MatmulArgs f = forward_args(C, 4 * C, b.w.data(), b.y.data(), true);
    f.aux = b.z.data();
    f.epilogue = gpu::Epilogue::kGelu;
    add("matmul fc forward + gelu", dims({N, C, 4 * C}), mm, io + 4.0 * double(C) * e,
        [&, f] { return k.matmul(s, f); });
    gpu::MatmulArgs dx = f;  // dinp[N,4C] = gelu'(x) * dout[N,C] w[C,4C]
    dx.a = b.y.data();
    dx.c = b.z.data();
    dx.aux = b.x.data();
    dx.bias = nullptr;
    dx.epilogue = gpu::Epilogue::kGeluBackward;
    dx.k = C;
    dx.trans_b = false;
    add("matmul fc proj dinp + dgelu", dims({N, C, 4 * C}), mm, io,
        [&, dx] { return k.matmul(s, dx); });
  }
  add("layernorm backward", dims({N, C}), 0.0,
      (4 * nc + double(C)) * e + 8.0 * double(N) + 4.0 * double(C) * e, [&] {
        return k.layernorm_backward(s, b.z.data(), b.w.data(), b.dw.data(), b.y.data(), b.x.data(),
                                    b.w.data(), mean, rstd, N, C, dt);
      });
  // The head: logits = x wteᵀ (its three matmuls, no bias), and the loss with its gradient in
  // place.
  linear("head", C, Vp, b.wte.data(), b.logits.data(), b.dwte.data(), false);
  add("softmax + cross-entropy", dims({N, Vp}), 0.0, 2.0 * double(N * Vp) * e + 8.0 * double(N),
      [&] {
        return k.softmax_cross_entropy(s, static_cast<float*>(b.stats.data()), b.logits.data(),
                                       tokens, N, sh.V, Vp, 1.0f / float(N), dt);
      });
  add("embedding forward", dims({N, C}), 0.0, 2 * nc * e + 4.0 * double(N) + double(T * C) * e,
      [&] {
        return k.embedding_forward(s, b.z.data(), tokens, b.wte.data(), b.w.data(), B, T, C, dt);
      });
  add("embedding backward", dims({N, C}), 0.0, (2 * nc + 2 * double(T * C)) * e + 4.0 * double(N),
      [&] {
        return k.embedding_backward(s, b.dwte.data(), b.dw.data(), b.y.data(), tokens, B, T, C, dt);
      });
  // A layer's update on the device and its gradient's sum of squares.
  gpu::AdamArgs a;
  a.params = static_cast<float*>(b.f32a.data());
  a.exp_avg = static_cast<float*>(b.f32b.data());
  a.exp_avg_sq = static_cast<float*>(b.f32c.data());
  a.grads = b.w.data();
  a.grad_dtype = dt;
  a.out16 = dt == DType::kF32 ? nullptr : b.dw.data();
  a.out_dtype = dt == DType::kF32 ? DType::kBF16 : dt;
  a.numel = std::min<int64_t>(P, 4 * C * C);  // the gradient buffer holds 4C² elements
  a.constants = check(cpu::CpuAdam(cpu::AdamHyper{}).constants(cpu::AdamStep{1, 1.0f}));
  add("adam (a layer's shard)", dims({a.numel}), 0.0,
      double(a.numel) * (24.0 + (a.out16 != nullptr ? 2.0 * e : e)),
      [&] { return k.adam_step(s, a); });
  add("sum_squares", dims({4 * N * C}), 0.0, 4 * nc * e, [&] {
    return k.sum_squares(s, static_cast<float*>(b.stats.data()), b.x.data(), 4 * N * C, dt, false);
  });
  return out;
}

int main_impl(int argc, char** argv) {
  CLI::App app{
      "bench_kernels: each kernel of a GPT-2 step at GPT-2 124M's and a 1.5B model's shapes: "
      "time, FLOPs, bytes, TFLOP/s, GB/s and the fraction of the datasheet's roofline"};
  std::string device_name = "auto", dtype_flag = "bf16", shapes_flag = "both";
  int64_t batch = 0, seq = 0;
  int repeats = 5;
  double peak_flops = 0.0, peak_bandwidth = 0.0;
  bool quick = false;
  app.add_option("--device", device_name, "auto|cpu|cuda")->capture_default_str();
  app.add_option("--dtype", dtype_flag, "bf16|fp16|fp32")->capture_default_str();
  app.add_option("--shapes", shapes_flag, "124m|1.5b|both")->capture_default_str();
  app.add_option("--batch", batch, "B (0: 8 on a GPU, 1 on the CPU)");
  app.add_option("--seq", seq, "T (0: 1024 on a GPU, 256 on the CPU, 64 with --quick)");
  app.add_option("--repeats", repeats, "timed repeats per kernel (the median)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--peak-flops", peak_flops, "FLOP/s of the roofline (0: the datasheet's)");
  app.add_option("--peak-bandwidth", peak_bandwidth,
                 "bytes/s of the roofline (0: the datasheet's)");
  app.add_flag("--quick", quick, "fewer repeats and, on the CPU, T 64: under 30 s");
  CLI11_PARSE(app, argc, argv);
  const DType dt = check(parse_dtype(dtype_flag));
  if (shapes_flag != "124m" && shapes_flag != "1.5b" && shapes_flag != "both") {
    std::fprintf(stderr, "bench_kernels: --shapes '%s' is not accepted (124m, 1.5b or both)\n",
                 shapes_flag.c_str());
    return 1;
  }
  const gpu::DeviceKind kind = check(gpu::parse_device_kind(device_name));
  std::unique_ptr<gpu::Device> dev = check(gpu::create_device(kind, {}));
  const bool gpu_dev = kind == gpu::DeviceKind::kCuda;
  if (quick) repeats = std::min(repeats, 3);
  if (batch <= 0) batch = gpu_dev ? 8 : 1;
  if (seq <= 0) seq = gpu_dev ? 1024 : quick ? 64 : 256;
  const int inner = gpu_dev ? 5 : 1;
  const double flops_roof =
      peak_flops > 0 ? peak_flops : gpu::datasheet_peak_flops(dev->name(), dt);
  const double bytes_roof =
      peak_bandwidth > 0 ? peak_bandwidth : gpu::datasheet_memory_bandwidth(dev->name());
  std::vector<Shape> shapes;
  if (shapes_flag != "1.5b") shapes.push_back({"gpt2-124m", batch, seq, 768, 12});
  if (shapes_flag != "124m") shapes.push_back({"gpt2-1.5b", batch, seq, 1600, 25});
  std::unique_ptr<gpu::Stream> s = check(dev->create_stream());
  std::printf("bench_kernels: device %s, %s, B %lld T %lld, median of %d%s\n", dev->name().c_str(),
              std::string(dtype_name(dt)).c_str(), static_cast<long long>(batch),
              static_cast<long long>(seq), repeats,
              inner > 1 ? (" (" + std::to_string(inner) + " calls each)").c_str() : "");
  if (flops_roof <= 0 || bytes_roof <= 0) {
    std::printf("roofline: no datasheet for this device (--peak-flops, --peak-bandwidth)\n");
  } else {
    std::printf("roofline: %.4g FLOP/s, %.4g bytes/s\n", flops_roof, bytes_roof);
  }
  nlohmann::json j;
  j["bench"] = "bench_kernels";
  j["device"] = dev->name();
  j["dtype"] = dtype_name(dt);
  j["batch"] = batch;
  j["seq"] = seq;
  j["peak_flops"] = flops_roof;
  j["peak_bandwidth"] = bytes_roof;
  for (const Shape& sh : shapes) {
    std::printf("\n%s (C %lld, %lld heads, Vp %lld)\n", sh.name.c_str(),
                static_cast<long long>(sh.C), static_cast<long long>(sh.NH),
                static_cast<long long>(sh.Vp));
    std::printf("%-30s %-18s %9s %9s %9s %8s %8s %9s\n", "kernel", "dims", "GFLOP", "MB", "ms",
                "TFLOP/s", "GB/s", "roofline");
    double total = 0.0;
    nlohmann::json rows = nlohmann::json::array();
    for (const Measured& m : run_shape(*dev, *s, sh, dt, repeats, inner)) {
      const double roof = std::max(flops_roof > 0 ? m.flops / flops_roof : 0.0,
                                   bytes_roof > 0 ? m.bytes / bytes_roof : 0.0);
      const bool has_roof = flops_roof > 0 && bytes_roof > 0;
      total += m.seconds;
      char frac[16] = "-";
      if (has_roof) std::snprintf(frac, sizeof(frac), "%.2f", roof / m.seconds);
      std::printf("%-30s %-18s %9.3f %9.2f %9.4f %8.2f %8.1f %9s\n", m.kernel.c_str(),
                  m.dims.c_str(), m.flops * 1e-9, m.bytes * 1e-6, m.seconds * 1e3,
                  m.flops / m.seconds * 1e-12, m.bytes / m.seconds * 1e-9, frac);
      nlohmann::json r;
      r["kernel"] = m.kernel;
      r["dims"] = m.dims;
      r["flops"] = m.flops;
      r["bytes"] = m.bytes;
      r["seconds"] = m.seconds;
      r["roofline_fraction"] = has_roof ? roof / m.seconds : 0.0;
      rows.push_back(r);
    }
    std::printf("%-30s %-18s %9s %9s %9.4f\n", "sum", "", "", "", total * 1e3);
    j[sh.name] = rows;
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::main_impl(argc, argv); }

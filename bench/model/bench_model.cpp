// bench_model: GPT forward+backward throughput on a Device, and its fraction of the same
// device's dense matmul rate measured in the same run.
//
//   tokens_per_s       B*T / (median time of zero_grad + forward + backward), after a warm-up
//   flops_per_token    6*N + 6*L*C*T (model/flops.h, llm.c's: N = all parameters including the
//                      padded vocabulary rows and wpe; attention counted as 6*L*C*T, recompute
//                      from activation checkpointing not counted)
//   matmul_flops_per_s 2*M*N*K / (median time of one square matmul via Kernels::matmul, in the
//                      model's dtype, fp32 accumulation)
//   mfu                tokens_per_s * flops_per_token / peak_flops_per_s: the GPU's datasheet
//                      dense peak (gpu/peak_flops.h; peak_source "datasheet"), else the
//                      measured matmul rate (the CpuDevice; "measured matmul")
//   mfu_vs_matmul      tokens_per_s * flops_per_token / matmul_flops_per_s
// One definition of model FLOPs with the trainer (model/flops.h). Also timed alone, on the
// model's shapes: the attention kernels (L forwards + L backwards; attention_ms, attention_share
// of the step) and the step's matmuls (matmuls_ms, matmuls_share), so a low MFU says at once
// where the time goes.
// Default model: on the CpuDevice L=4 C=256 NH=4 T=128 B=8; on CUDA GPT-2 small (124M:
// L=12 C=768 NH=12 T=1024 B=8), the size the GPU figures are compared at. Flags override.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/dtype.h"
#include "gpu/device.h"
#include "gpu/kernels.h"
#include "gpu/peak_flops.h"
#include "model/flops.h"
#include "model/gpt.h"

namespace {

using namespace strata;
using bench::Clock;
using bench::median;

// Median seconds of `once` over `repeats` runs, after one warm-up run.
template <typename F>
Result<double> median_seconds(int repeats, F&& once) {
  STRATA_RETURN_IF_ERROR(once());
  std::vector<double> secs;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    STRATA_RETURN_IF_ERROR(once());
    secs.push_back(bench::seconds_since(t0));
  }
  return median(secs);
}

// Seconds of one n x n x n matmul (median over repeats of `iters` back-to-back calls).
Result<double> time_matmul(gpu::Device& dev, int64_t n, DType dt, int repeats, int iters) {
  const size_t bytes = static_cast<size_t>(n * n) * dtype_size(dt);
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer a, dev.allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer b, dev.allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer c, dev.allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(auto stream, dev.create_stream());
  // Random data in [-1, 1): zeros would flatter a GPU (less power, higher clocks).
  std::vector<float> host_f32(static_cast<size_t>(n * n));
  for (size_t i = 0; i < host_f32.size(); ++i) {
    host_f32[i] = static_cast<float>((i * 2654435761u) % 2048u) / 1024.0f - 1.0f;
  }
  std::vector<char> host(bytes);
  convert(host_f32.data(), DType::kF32, host.data(), dt, host_f32.size());
  // From a pageable vector: the synchronous set-up copy (DESIGN.md §3).
  STRATA_RETURN_IF_ERROR(
      stream->copy_now(a.data(), host.data(), bytes, gpu::CopyKind::kHostToDevice));
  STRATA_RETURN_IF_ERROR(
      stream->copy_now(b.data(), host.data(), bytes, gpu::CopyKind::kHostToDevice));
  gpu::MatmulArgs mm;
  mm.a = a.data();
  mm.b = b.data();
  mm.c = c.data();
  mm.dtype_ab = dt;
  mm.dtype_c = dt;
  mm.m = mm.n = mm.k = n;
  mm.trans_b = true;  // the layout of the model's forward matmuls
  auto calls = [&]() -> Status {
    for (int i = 0; i < iters; ++i) STRATA_RETURN_IF_ERROR(dev.kernels().matmul(*stream, mm));
    return stream->synchronize();
  };
  STRATA_ASSIGN_OR_RETURN(const double secs, median_seconds(repeats, calls));
  return secs / iters;
}

// Seconds of the attention kernels of one step: `layers` forwards and backwards on [B,T,C] with
// NH heads (median over repeats).
Result<double> time_attention(gpu::Device& dev, int64_t layers, int64_t B, int64_t T, int64_t C,
                              int64_t NH, DType dt, int repeats) {
  const size_t e = dtype_size(dt);
  const auto btc = static_cast<size_t>(B * T * C);
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer qkv, dev.allocate(3 * btc * e));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer dqkv, dev.allocate(3 * btc * e));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer out, dev.allocate(btc * e));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer dout, dev.allocate(btc * e));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer lse, dev.allocate(static_cast<size_t>(B * NH * T) * 4));
  STRATA_ASSIGN_OR_RETURN(auto stream, dev.create_stream());
  // Constant small inputs (bytes 0x3c: 0.0115 in bf16, 1.06 in fp16): the kernels' time does not
  // depend on the values, only finite ones are needed.
  STRATA_RETURN_IF_ERROR(stream->memset(qkv.data(), 0x3c, qkv.size_bytes()));
  STRATA_RETURN_IF_ERROR(stream->memset(dout.data(), 0x3c, dout.size_bytes()));
  gpu::Kernels& k = dev.kernels();
  auto once = [&]() -> Status {
    for (int64_t l = 0; l < layers; ++l) {
      STRATA_RETURN_IF_ERROR(k.attention_forward(*stream, out.data(), lse.as<float>(), qkv.data(),
                                                 B, T, C, NH, NH, dt));
    }
    for (int64_t l = 0; l < layers; ++l) {
      STRATA_RETURN_IF_ERROR(k.attention_backward(*stream, dqkv.data(), dout.data(), qkv.data(),
                                                  out.data(), lse.as<float>(), B, T, C, NH, NH,
                                                  dt));
    }
    return stream->synchronize();
  };
  return median_seconds(repeats, once);
}

// Seconds of the model's matmuls of one step (median over repeats): per layer the four linears
// (C->3C, C->C, C->4C, 4C->C) forward, weight gradient and input gradient, and the tied
// classifier (C->Vp) the same, with the shapes and transposes of src/model.
Result<double> time_model_matmuls(gpu::Device& dev, const model::GptConfig& cfg, int64_t B,
                                  int64_t T, int repeats) {
  const int64_t n = B * T, c = cfg.channels, vp = cfg.vp();
  const size_t e = dtype_size(cfg.dtype);
  const int64_t widest = std::max<int64_t>(4 * c, vp);
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer x, dev.allocate(static_cast<size_t>(n * widest) * e));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer y, dev.allocate(static_cast<size_t>(n * widest) * e));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer w, dev.allocate(static_cast<size_t>(widest * c) * e));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer dw, dev.allocate(static_cast<size_t>(widest * c) * e));
  STRATA_ASSIGN_OR_RETURN(auto stream, dev.create_stream());
  for (const gpu::DeviceBuffer* b : {&x, &y, &w, &dw}) {
    STRATA_RETURN_IF_ERROR(stream->memset(b->data(), 0x3c, b->size_bytes()));
  }
  gpu::Kernels& k = dev.kernels();
  auto linear = [&](int64_t in, int64_t out) -> Status {
    gpu::MatmulArgs mm;
    mm.dtype_ab = mm.dtype_c = cfg.dtype;
    mm.a = x.data();  // forward: Y[n,out] = X[n,in] . W[out,in]^T
    mm.b = w.data();
    mm.c = y.data();
    mm.m = n;
    mm.n = out;
    mm.k = in;
    mm.trans_b = true;
    STRATA_RETURN_IF_ERROR(k.matmul(*stream, mm));
    mm = gpu::MatmulArgs{};  // dW[out,in] += dY[n,out]^T . X[n,in]
    mm.dtype_ab = mm.dtype_c = cfg.dtype;
    mm.a = y.data();
    mm.b = x.data();
    mm.c = dw.data();
    mm.m = out;
    mm.n = in;
    mm.k = n;
    mm.trans_a = true;
    mm.beta = 1.0f;
    STRATA_RETURN_IF_ERROR(k.matmul(*stream, mm));
    mm = gpu::MatmulArgs{};  // dX[n,in] = dY[n,out] . W[out,in]
    mm.dtype_ab = mm.dtype_c = cfg.dtype;
    mm.a = y.data();
    mm.b = w.data();
    mm.c = x.data();
    mm.m = n;
    mm.n = in;
    mm.k = out;
    return k.matmul(*stream, mm);
  };
  auto once = [&]() -> Status {
    for (int64_t l = 0; l < cfg.layers; ++l) {
      STRATA_RETURN_IF_ERROR(linear(c, 3 * c));
      STRATA_RETURN_IF_ERROR(linear(c, c));
      STRATA_RETURN_IF_ERROR(linear(c, 4 * c));
      STRATA_RETURN_IF_ERROR(linear(4 * c, c));
    }
    STRATA_RETURN_IF_ERROR(linear(c, vp));
    return stream->synchronize();
  };
  return median_seconds(repeats, once);
}

int run(int argc, char** argv) {
  CLI::App app{
      "bench_model: GPT forward+backward tokens/s and MFU against the datasheet's peak (a GPU) "
      "or the measured matmul rate"};
  std::string device_name = "auto", dtype_name_flag = "bf16";
  int64_t layers = 4, channels = 256, heads = 4, seq = 128, batch = 8, vocab = 50257;
  int64_t ckpt = 0, matmul_n = 0;
  int repeats = 5;
  bool quick = false;
  app.add_option("--device", device_name, "auto|cpu|cuda")->capture_default_str();
  app.add_option("--layers", layers)->capture_default_str();
  app.add_option("--channels", channels)->capture_default_str();
  app.add_option("--heads", heads)->capture_default_str();
  app.add_option("--seq", seq)->capture_default_str();
  app.add_option("--batch", batch)->capture_default_str();
  app.add_option("--vocab", vocab)->capture_default_str();
  app.add_option("--dtype", dtype_name_flag, "bf16|fp16|fp32")->capture_default_str();
  app.add_option("--checkpoint-interval", ckpt, "K (0 = keep every layer)")->capture_default_str();
  app.add_option("--matmul-size", matmul_n, "n of the n^3 rate matmul (0 = by device)");
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_flag("--quick", quick, "small config, under 30 s");
  CLI11_PARSE(app, argc, argv);

  auto kind = gpu::parse_device_kind(device_name);
  if (!kind.ok()) {
    std::fprintf(stderr, "bench_model: --device %s: %s\n", device_name.c_str(),
                 kind.status().message().c_str());
    return 2;
  }
  auto dt = parse_dtype(dtype_name_flag);
  if (!dt.ok()) {
    std::fprintf(stderr, "bench_model: --dtype %s is not accepted (bf16|fp16|fp32)\n",
                 dtype_name_flag.c_str());
    return 2;
  }
  if (repeats < 1) {
    std::fprintf(stderr, "bench_model: --repeats %d must be >= 1\n", repeats);
    return 2;
  }
  const bool is_cuda = kind.value() == gpu::DeviceKind::kCuda;
  if (is_cuda) {  // GPT-2 small unless the flags say otherwise
    if (app.count("--layers") == 0) layers = 12;
    if (app.count("--channels") == 0) channels = 768;
    if (app.count("--heads") == 0) heads = 12;
    if (app.count("--seq") == 0) seq = 1024;
  }
  if (quick && !is_cuda) {
    layers = std::min<int64_t>(layers, 2);
    channels = std::min<int64_t>(channels, 128);
    heads = std::min<int64_t>(heads, 4);
    seq = std::min<int64_t>(seq, 64);
    batch = std::min<int64_t>(batch, 4);
    vocab = std::min<int64_t>(vocab, 8192);
  }
  if (matmul_n <= 0) matmul_n = is_cuda ? 8192 : (quick ? 1024 : 2048);

  auto dev_r = gpu::create_device(kind.value(), {});
  if (!dev_r.ok()) {
    std::fprintf(stderr, "bench_model: --device %s: %s\n", device_name.c_str(),
                 dev_r.status().to_string().c_str());
    return 1;
  }
  gpu::Device& dev = *dev_r.value();

  model::GptConfig cfg;
  cfg.vocab = vocab;
  cfg.max_seq = seq;
  cfg.layers = layers;
  cfg.heads = heads;
  cfg.channels = channels;
  cfg.dtype = dt.value();
  const model::RunShape shape{batch, seq, ckpt};
  std::vector<double> step_s;
  {
    auto model_r = model::GptModel::create(dev, cfg, shape);
    if (!model_r.ok()) {
      std::fprintf(stderr, "bench_model: %s\n", model_r.status().to_string().c_str());
      return 1;
    }
    model::GptModel& model = *model_r.value();
    Status st = model.init_params(1);
    std::vector<int32_t> tokens(static_cast<size_t>(batch * seq)), targets(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 2654435761u) % static_cast<uint64_t>(vocab));
      targets[i] = static_cast<int32_t>((i * 40503u + 7) % static_cast<uint64_t>(vocab));
    }
    for (int r = -1; r < repeats && st.ok(); ++r) {  // r = -1: warm-up
      const auto t0 = Clock::now();
      st = model.zero_grad();
      if (st.ok()) st = model.forward(tokens.data(), targets.data()).status();
      if (st.ok()) st = model.backward();
      if (r >= 0) step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    if (!st.ok()) {
      std::fprintf(stderr, "bench_model: %s\n", st.to_string().c_str());
      return 1;
    }
  }  // free the model before the matmul buffers
  auto mm_s = time_matmul(dev, matmul_n, dt.value(), std::max(repeats, 5), is_cuda ? 20 : 1);
  if (!mm_s.ok()) {
    std::fprintf(stderr, "bench_model: matmul rate: %s\n", mm_s.status().to_string().c_str());
    return 1;
  }
  auto attn_s = time_attention(dev, layers, batch, seq, channels, heads, dt.value(), repeats);
  if (!attn_s.ok()) {
    std::fprintf(stderr, "bench_model: attention: %s\n", attn_s.status().to_string().c_str());
    return 1;
  }
  auto lin_s = time_model_matmuls(dev, cfg, batch, seq, repeats);
  if (!lin_s.ok()) {
    std::fprintf(stderr, "bench_model: model matmuls: %s\n", lin_s.status().to_string().c_str());
    return 1;
  }
  const double step = median(step_s);
  const double tokens_per_s = static_cast<double>(batch * seq) / step;
  const double flops_per_token =
      model::training_flops_per_token(cfg.num_params(), layers, channels, seq);
  const double matmul_rate = 2.0 * std::pow(static_cast<double>(matmul_n), 3) / mm_s.value();
  const double mfu_vs_matmul = tokens_per_s * flops_per_token / matmul_rate;
  // MFU against the datasheet's peak where the device has one, else the measured rate.
  const double datasheet = gpu::datasheet_peak_flops(dev.name(), cfg.dtype);
  const double peak = datasheet > 0.0 ? datasheet : matmul_rate;
  const double mfu = tokens_per_s * flops_per_token / peak;

  std::printf("device            %s\n", dev.name().c_str());
  std::printf("model             %s, B=%lld T=%lld K=%lld, %.2fM params\n", cfg.describe().c_str(),
              static_cast<long long>(batch), static_cast<long long>(seq),
              static_cast<long long>(ckpt), static_cast<double>(cfg.num_params()) / 1e6);
  std::printf("step (fwd+bwd)    %.2f ms (median of %d)\n", step * 1e3, repeats);
  std::printf("tokens/s          %.0f\n", tokens_per_s);
  std::printf("FLOPs/token       %.3g (6N + 6LCT)\n", flops_per_token);
  std::printf("model FLOP/s      %.3g\n", tokens_per_s * flops_per_token);
  std::printf("matmul FLOP/s     %.3g (%lld^3 %s)\n", matmul_rate, static_cast<long long>(matmul_n),
              dtype_name(cfg.dtype).data());
  if (datasheet > 0.0) {
    std::printf("datasheet peak    %.4g FLOP/s (dense %s)\n", datasheet,
                dtype_name(cfg.dtype).data());
    std::printf("MFU               %.3f (against the datasheet's peak)\n", mfu);
  } else {
    std::printf("MFU               %.3f (against the measured matmul rate: no datasheet peak)\n",
                mfu);
  }
  std::printf("MFU vs matmul     %.3f\n", mfu_vs_matmul);
  std::printf("attention alone   %.2f ms (L fwd + L bwd), %.2f of the step\n", attn_s.value() * 1e3,
              attn_s.value() / step);
  std::printf("matmuls alone     %.2f ms (the step's 12L+3 products), %.2f of the step\n",
              lin_s.value() * 1e3, lin_s.value() / step);
  std::printf("the rest          %.2f of the step (norms, elementwise, loss, launches)\n",
              1.0 - (attn_s.value() + lin_s.value()) / step);

  nlohmann::json j;
  j["bench"] = "model";
  j["device"] = std::string(gpu::device_kind_name(dev.kind()));
  j["device_name"] = dev.name();
  j["quick"] = quick;
  j["layers"] = layers;
  j["channels"] = channels;
  j["heads"] = heads;
  j["seq"] = seq;
  j["batch"] = batch;
  j["vocab"] = vocab;
  j["dtype"] = std::string(dtype_name(cfg.dtype));
  j["checkpoint_interval"] = ckpt;
  j["params"] = cfg.num_params();
  j["step_ms"] = step * 1e3;
  j["tokens_per_s"] = tokens_per_s;
  j["flops_per_token"] = flops_per_token;
  j["flops_per_token_formula"] = "6N+6LCT";
  j["matmul_size"] = matmul_n;
  j["matmul_flops_per_s"] = matmul_rate;
  j["peak_flops_per_s"] = peak;
  j["peak_source"] = datasheet > 0.0 ? "datasheet" : "measured matmul";
  j["mfu"] = mfu;
  j["mfu_vs_matmul"] = mfu_vs_matmul;
  j["attention_ms"] = attn_s.value() * 1e3;
  j["attention_share"] = attn_s.value() / step;
  j["matmuls_ms"] = lin_s.value() * 1e3;
  j["matmuls_share"] = lin_s.value() / step;
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }

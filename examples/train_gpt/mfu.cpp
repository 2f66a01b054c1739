#include "mfu.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "gpu/kernels.h"
#include "gpu/peak_flops.h"
#include "model/flops.h"

namespace strata::train_gpt {

double flops_per_token(const ModelSpec& spec, int64_t seq) {
  return model::training_flops_per_token(spec.num_params(), spec.layers(), spec.channels(), seq);
}

Result<double> measure_matmul_rate(gpu::Device& dev, DType dt) {
  const int64_t n = dev.kind() == gpu::DeviceKind::kCuda ? 4096 : 256;
  const size_t bytes = static_cast<size_t>(n * n) * dtype_size(dt);
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer a, dev.allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer b, dev.allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer c, dev.allocate(bytes));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Stream> s, dev.create_stream());
  STRATA_RETURN_IF_ERROR(s->memset(a.data(), 0, bytes));
  STRATA_RETURN_IF_ERROR(s->memset(b.data(), 0, bytes));
  gpu::MatmulArgs m;
  m.a = a.data();
  m.b = b.data();
  m.c = c.data();
  m.dtype_ab = dt;
  m.dtype_c = dt;
  m.m = m.n = m.k = n;
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {  // the first is the warm-up
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 4; ++r) STRATA_RETURN_IF_ERROR(dev.kernels().matmul(*s, m));
    STRATA_RETURN_IF_ERROR(s->synchronize());
    const double sec =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 4;
    if (i > 0) best = std::min(best, sec);
  }
  return 2.0 * static_cast<double>(n * n * n) / best;
}

double peak_flops_of(double flag, gpu::Device& dev, DType dt, bool lead) {
  if (flag != 0.0 || !lead) return flag;
  const double datasheet = gpu::datasheet_peak_flops(dev.name(), dt);
  auto rate = measure_matmul_rate(dev, dt);
  const std::string type(dtype_name(dt));
  if (datasheet > 0.0) {
    std::printf(
        "mfu: against the datasheet's dense %s peak of %s, %.4g FLOP/s per rank "
        "(--peak-flops sets it)",
        type.c_str(), dev.name().c_str(), datasheet);
    if (rate.ok()) {
      std::printf("; the measured matmul rate is %.4g, %.1f%% of it", rate.value(),
                  100.0 * rate.value() / datasheet);
    }
    std::printf("\n");
    return datasheet;
  }
  if (!rate.ok()) return 0.0;  // without room for the buffers: no MFU column
  std::printf(
      "mfu: against the device's measured %s matmul rate, %.3g FLOP/s per rank (no datasheet "
      "peak for %s; --peak-flops sets it)\n",
      type.c_str(), rate.value(), dev.name().c_str());
  return rate.value();
}

}  // namespace strata::train_gpt

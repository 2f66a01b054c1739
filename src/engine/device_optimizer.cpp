#include "engine/device_optimizer.h"

#include <cmath>

#include "engine/engine_config.h"
#include "gpu/kernels.h"

namespace strata::engine {

std::vector<bool> DeviceOptimizer::choose(const OffloadedOptimizer& optimizer, double fraction) {
  const size_t np = optimizer.num_partitions();
  std::vector<bool> on(np, false);
  double total = 0;
  for (size_t p = 0; p < np; ++p) total += static_cast<double>(optimizer.numel(p));
  double taken = 0;
  for (size_t k = 0; k < np; ++k) {
    const size_t p = np - 1 - k;
    // NVMe takes partitions from the front, the device from the back: they meet, never overlap,
    // so that shares adding up to at most 1 are always accepted (the device's may round down).
    if (optimizer.on_nvme(p)) break;
    const double n = static_cast<double>(optimizer.numel(p));
    // Take the partition while that brings the share nearer to the fraction.
    if (std::abs(taken + n - fraction * total) > std::abs(taken - fraction * total)) break;
    on[p] = true;
    taken += n;
  }
  return on;
}

Result<DeviceOptimizer> DeviceOptimizer::create(OffloadedOptimizer& optimizer, gpu::Device& device,
                                                gpu::Stream& stream, std::vector<bool> on_device) {
  OffloadedOptimizer& opt = optimizer;
  if (on_device.empty()) on_device.assign(opt.num_partitions(), true);
  DeviceOptimizer d;
  d.device_ = &device;
  for (size_t p = 0; p < opt.num_partitions(); ++p) {
    if (!on_device[p]) {
      d.state_.emplace_back();
      continue;
    }
    if (opt.on_nvme(p)) {
      return make_error(ErrorCode::kConfig, "optimizer partition ", p,
                        " is both on NVMe and on the device: ", ref(Field::kOptimizerNvmeFraction),
                        " and ", ref(Field::kGpuOptimizerFraction), " (all of it with ",
                        ref(Field::kOffloadOptimizer), " none) must add up to at most 1");
    }
    const auto n = static_cast<size_t>(opt.numel(p));
    if (opt.options().plan_only) {  // the planner: the room only
      STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer buf, device.allocate(3 * n * 4));
      d.state_.push_back(std::move(buf));
      continue;
    }
    std::vector<float> host(3 * n);
    STRATA_RETURN_IF_ERROR(opt.read_state(p, host.data(), host.data() + n, host.data() + 2 * n));
    STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer buf, device.allocate(host.size() * 4));
    STRATA_RETURN_IF_ERROR(
        stream.copy_now(buf.data(), host.data(), host.size() * 4, gpu::CopyKind::kHostToDevice));
    d.state_.push_back(std::move(buf));
  }
  return d;
}

Status DeviceOptimizer::download(OffloadedOptimizer& optimizer, gpu::Stream& stream) const {
  for (size_t p = 0; p < state_.size(); ++p) {
    if (!on_device(p)) continue;
    const auto n = static_cast<size_t>(optimizer.numel(p));
    std::vector<float> host(3 * n);
    STRATA_RETURN_IF_ERROR(stream.copy_now(host.data(), state_[p].data(), host.size() * 4,
                                           gpu::CopyKind::kDeviceToHost));
    STRATA_RETURN_IF_ERROR(optimizer.load(p, host.data(), host.data() + n, host.data() + 2 * n));
  }
  return ok_status();
}

Status DeviceOptimizer::update(gpu::Stream& stream, const OffloadedOptimizer& optimizer, size_t p,
                               const void* grads, DType grad_dtype, void* out, DType dtype,
                               const cpu::AdamStep& step) {
  STRATA_ASSIGN_OR_RETURN(const cpu::AdamConstants k, optimizer.adam().constants(step));
  const cpu::AdamConstants plain = cpu::without_decay(k);
  const int64_t n = optimizer.numel(p);
  float* state = state_[p].as<float>();
  const size_t es = dtype_size(dtype), gs = dtype_size(grad_dtype);
  // The decayed ranges with the step's constants, the rest without the decay.
  STRATA_RETURN_IF_ERROR(
      for_each_decay_segment(optimizer.decayed(p), n, [&](int64_t begin, int64_t end, bool decay) {
        gpu::AdamArgs a;
        a.params = state + begin;
        a.exp_avg = state + n + begin;
        a.exp_avg_sq = state + 2 * n + begin;
        a.grads = static_cast<const std::byte*>(grads) + size_t(begin) * gs;
        a.grad_dtype = grad_dtype;
        a.out16 =
            dtype == DType::kF32 ? nullptr : static_cast<std::byte*>(out) + size_t(begin) * es;
        a.out_dtype = dtype;
        a.numel = end - begin;
        a.constants = decay ? k : plain;
        return device_->kernels().adam_step(stream, a);
      }));
  if (dtype != DType::kF32) return ok_status();
  return stream.copy(out, state, static_cast<size_t>(n) * 4, gpu::CopyKind::kDeviceToDevice);
}

uint64_t DeviceOptimizer::bytes() const {
  uint64_t total = 0;
  for (const auto& b : state_) total += b.size_bytes();
  return total;
}

}  // namespace strata::engine

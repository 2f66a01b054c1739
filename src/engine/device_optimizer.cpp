#include "engine/device_optimizer.h"

#include "gpu/kernels.h"

namespace strata::engine {

Result<DeviceOptimizer> DeviceOptimizer::create(OffloadedOptimizer& optimizer, gpu::Device& device,
                                                gpu::Stream& stream) {
  if (optimizer.nvme_state_bytes() > 0) {
    return make_error(ErrorCode::kConfig,
                      "--offload-optimizer none keeps the optimizer state on the device: it "
                      "cannot have an NVMe share (--optimizer-nvme-fraction 0)");
  }
  DeviceOptimizer d;
  d.device_ = &device;
  OffloadedOptimizer& opt = optimizer;
  for (size_t p = 0; p < opt.num_partitions(); ++p) {
    const auto n = static_cast<size_t>(opt.numel(p));
    std::vector<float> host(3 * n);
    STRATA_RETURN_IF_ERROR(opt.read_state(p, host.data(), host.data() + n, host.data() + 2 * n));
    STRATA_ASSIGN_OR_RETURN(gpu::DeviceBuffer buf, device.allocate(host.size() * 4));
    STRATA_RETURN_IF_ERROR(
        stream.copy(buf.data(), host.data(), host.size() * 4, gpu::CopyKind::kHostToDevice));
    STRATA_RETURN_IF_ERROR(stream.synchronize());
    d.state_.push_back(std::move(buf));
  }
  return d;
}

Status DeviceOptimizer::download(OffloadedOptimizer& optimizer, gpu::Stream& stream) const {
  for (size_t p = 0; p < state_.size(); ++p) {
    const auto n = static_cast<size_t>(optimizer.numel(p));
    std::vector<float> host(3 * n);
    STRATA_RETURN_IF_ERROR(
        stream.copy(host.data(), state_[p].data(), host.size() * 4, gpu::CopyKind::kDeviceToHost));
    STRATA_RETURN_IF_ERROR(stream.synchronize());
    STRATA_RETURN_IF_ERROR(optimizer.load(p, host.data(), host.data() + n, host.data() + 2 * n));
  }
  return ok_status();
}

Status DeviceOptimizer::update(gpu::Stream& stream, const OffloadedOptimizer& optimizer, size_t p,
                               const void* grads, void* out, DType dtype,
                               const cpu::AdamStep& step) {
  STRATA_ASSIGN_OR_RETURN(const cpu::AdamConstants k, optimizer.adam().constants(step));
  const int64_t n = optimizer.numel(p);
  float* state = state_[p].as<float>();
  gpu::AdamArgs a;
  a.params = state;
  a.exp_avg = state + n;
  a.exp_avg_sq = state + 2 * n;
  a.grads = grads;
  a.grad_dtype = dtype;
  a.out16 = dtype == DType::kF32 ? nullptr : out;
  a.out_dtype = dtype;
  a.numel = n;
  a.constants = k;
  STRATA_RETURN_IF_ERROR(device_->kernels().adam_step(stream, a));
  if (dtype != DType::kF32) return ok_status();
  return stream.copy(out, state, static_cast<size_t>(n) * 4, gpu::CopyKind::kDeviceToDevice);
}

uint64_t DeviceOptimizer::bytes() const {
  uint64_t total = 0;
  for (const auto& b : state_) total += b.size_bytes();
  return total;
}

}  // namespace strata::engine

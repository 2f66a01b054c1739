// The SIMT-emulated CUDA device of the tests (simt_device.h). Compiled with the shim headers and
// `cuda` defined as `simt_cuda` (see simt_cuda.h).
#include "simt_device.h"

#include <vector>

#include "gpu/cpu_device.h"
#include "gpu/cuda/launch_kernels.h"
#include "gpu/kernels.h"

namespace strata::gpu::test {
namespace {

class SimtKernels final : public cuda::LaunchKernels {
 public:
  SimtKernels(Device* cpu, simt::Order order)
      : cpu_(cpu), order_(order), scratch_(cuda::kSumSquaresScratchFloats) {}

  Status matmul(Stream& s, const MatmulArgs& args) override {
    return cpu_->kernels().matmul(s, args);
  }

 protected:
  // Earlier work on `s` (uploads, memsets) completes first; the kernels then run on this thread.
  Result<LaunchTarget> prepare(Stream& s) const override {
    STRATA_RETURN_IF_ERROR(s.synchronize());
    simt::set_order(order_);
    return LaunchTarget{nullptr, scratch_.data()};
  }

 private:
  Device* cpu_;
  simt::Order order_;
  mutable std::vector<float> scratch_;
};

class SimtDevice final : public Device {
 public:
  SimtDevice(std::unique_ptr<Device> cpu, simt::Order order)
      : cpu_(std::move(cpu)), kernels_(cpu_.get(), order) {}

  DeviceKind kind() const override { return cpu_->kind(); }
  std::string name() const override { return "CUDA kernels emulated (SIMT) on " + cpu_->name(); }
  MemoryInfo memory_info() const override { return cpu_->memory_info(); }
  Result<DeviceBuffer> allocate(size_t bytes) override { return cpu_->allocate(bytes); }
  Result<std::unique_ptr<Stream>> create_stream() override { return cpu_->create_stream(); }
  Result<std::unique_ptr<Event>> create_event() override { return cpu_->create_event(); }
  Kernels& kernels() override { return kernels_; }
  Status synchronize() override { return cpu_->synchronize(); }

 protected:
  // Buffers are allocated by the CpuDevice and return to it directly.
  void release(void*, size_t) override {}

 private:
  std::unique_ptr<Device> cpu_;
  SimtKernels kernels_;
};

}  // namespace

Result<std::unique_ptr<Device>> create_simt_device(const DeviceOptions& options,
                                                   simt::Order order) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> cpu, create_cpu_device(options));
  return std::unique_ptr<Device>(new SimtDevice(std::move(cpu), order));
}

}  // namespace strata::gpu::test

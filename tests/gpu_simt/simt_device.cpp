// The SIMT-emulated CUDA device of the tests (simt_device.h). Compiled with the shim headers and
// `cuda` defined as `simt_cuda` (see simt_cuda.h).
#include "simt_device.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "gpu/cpu_device.h"
#include "gpu/cuda/cuda_status.h"
#include "gpu/cuda/launch.h"
#include "gpu/cuda/launch_kernels.h"
#include "gpu/kernels.h"
#include "reference_gemm.h"

namespace strata::gpu::test {
namespace {

class SimtKernels final : public cuda::LaunchKernels {
 public:
  SimtKernels(Device* cpu, simt::Order order)
      : cpu_(cpu), order_(order), scratch_(cuda::kStreamScratchFloats) {}

  // As CudaKernels::matmul does it (cuda_matmul.cpp), with the reference of the emulated cuBLASLt
  // (reference_gemm.h) in cuBLASLt's place: row-major C = op(A) op(B) is column-major C^T =
  // op(B)^T op(A)^T, the bias and GELU epilogues applied by the reference (or, where cuBLASLt
  // cannot take the epilogue, as their own kernels). The argument checks are the CpuDevice's.
  Status matmul(Stream& s, const MatmulArgs& args) override {
    STRATA_RETURN_IF_ERROR(check_matmul(args));
    if (!epilogue_fuses(args)) return matmul_in_sequence(s, args);
    STRATA_RETURN_IF_ERROR(prepare(s).status());
    simt::GemmEpilogue epilogue;
    epilogue.kind = args.epilogue == Epilogue::kGelu           ? simt::GemmEpilogue::kGeluAux
                    : args.epilogue == Epilogue::kGeluBackward ? simt::GemmEpilogue::kDGelu
                    : args.bias != nullptr                     ? simt::GemmEpilogue::kBias
                                                               : simt::GemmEpilogue::kNone;
    epilogue.bias = args.bias;
    epilogue.aux = args.aux;
    epilogue.ld_aux = args.n;
    simt::reference_gemm(args.trans_b, args.trans_a, args.n, args.m, args.k, args.alpha, args.b,
                         args.trans_b ? args.k : args.n, args.a, args.trans_a ? args.m : args.k,
                         args.dtype_ab, args.beta, args.c, args.c, args.n, args.dtype_c, epilogue);
    return ok_status();
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

// Every buffer is a heap block of exactly the bytes asked for (so the address sanitizer sees a
// kernel step outside it), backed by an allocation of the same size from the CpuDevice's pool
// for the cap, the accounting and the out-of-memory Status.
class SimtDevice final : public Device {
 public:
  SimtDevice(std::unique_ptr<Device> cpu, simt::Order order)
      : cpu_(std::move(cpu)), kernels_(cpu_.get(), order) {}
  ~SimtDevice() override { (void)cpu_->synchronize(); }

  DeviceKind kind() const override { return cpu_->kind(); }
  std::string name() const override { return "CUDA kernels emulated (SIMT) on " + cpu_->name(); }
  MemoryInfo memory_info() const override { return cpu_->memory_info(); }
  Result<DeviceBuffer> allocate(size_t bytes) override {
    STRATA_ASSIGN_OR_RETURN(DeviceBuffer pooled, cpu_->allocate(bytes));
    void* p = ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{256});
    std::lock_guard<std::mutex> lock(mu_);
    backing_.emplace(reinterpret_cast<uintptr_t>(p), std::move(pooled));
    return DeviceBuffer(this, p, bytes);
  }
  Result<std::unique_ptr<Stream>> create_stream() override { return cpu_->create_stream(); }
  Result<std::unique_ptr<Event>> create_event() override { return cpu_->create_event(); }
  Kernels& kernels() override { return kernels_; }
  Status synchronize() override { return cpu_->synchronize(); }

 protected:
  void release(void* ptr, size_t) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      backing_.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    ::operator delete (ptr, std::align_val_t{256});
  }

 private:
  std::unique_ptr<Device> cpu_;
  SimtKernels kernels_;
  std::mutex mu_;
  std::map<uintptr_t, DeviceBuffer> backing_;  // heap block -> its share of the CpuDevice's pool
};

}  // namespace

Result<std::unique_ptr<Device>> create_simt_device(const DeviceOptions& options,
                                                   simt::Order order) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Device> cpu, create_cpu_device(options));
  return std::unique_ptr<Device>(new SimtDevice(std::move(cpu), order));
}

}  // namespace strata::gpu::test

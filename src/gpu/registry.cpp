// The backend registry: the one file that knows which backends were built (DESIGN.md §2).
#include "gpu/cpu_device.h"
#include "gpu/device.h"

#if STRATA_WITH_CUDA
#include "gpu/cuda/cuda_backend.h"
#endif

namespace strata::gpu {

std::string_view device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda";
  }
  return "?";
}

Result<DeviceKind> parse_device_kind(std::string_view name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda" || name == "gpu") return DeviceKind::kCuda;
  if (name == "auto") return cuda_device_count() > 0 ? DeviceKind::kCuda : DeviceKind::kCpu;
  return make_error(ErrorCode::kConfig, "device '", name,
                    "' is not accepted (use auto, cpu or cuda)");
}

int cuda_device_count() {
#if STRATA_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::string cuda_pci_bus_id(int ordinal) {
#if STRATA_WITH_CUDA
  return cuda::pci_bus_id(ordinal);
#else
  (void)ordinal;
  return "";
#endif
}

Result<std::unique_ptr<Device>> create_device(DeviceKind kind, const DeviceOptions& options) {
  if (kind == DeviceKind::kCpu) return create_cpu_device(options);
#if STRATA_WITH_CUDA
  if (cuda::device_count() == 0) {
    return make_error(ErrorCode::kUnsupported, "no CUDA GPU is present (use the cpu device)");
  }
  return cuda::create_cuda_device(options);
#else
  return make_error(ErrorCode::kUnsupported,
                    "this build has no CUDA backend (rebuild with -DSTRATA_CUDA=ON on a machine "
                    "with nvcc, or use the cpu device)");
#endif
}

Result<std::unique_ptr<Device>> create_default_device(const DeviceOptions& options) {
  return create_device(cuda_device_count() > 0 ? DeviceKind::kCuda : DeviceKind::kCpu, options);
}

}  // namespace strata::gpu

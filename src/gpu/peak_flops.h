// The datasheet's dense tensor-core peak of a GPU, the denominator of MFU as users compare it
// (llm.c, DeepSpeed's flops profiler, the scaling papers): FLOP/s for bf16 or fp16 inputs with
// fp32 accumulation, without sparsity, by the device's name (Device::name()). Known: H100 SXM
// and H200 (and GH200) 989 TFLOP/s, H100 PCIe 756, A100 312 (other H100 forms are read as the
// SXM's; give the trainer --peak-flops for them). 0 for any other
// device, the CpuDevice and fp32 (whose rate is then measured: the trainer's and bench_model's
// matmul probe). Free function; thread-safe.
#pragma once

#include <string_view>

#include "core/dtype.h"

namespace strata::gpu {

double datasheet_peak_flops(std::string_view device_name, DType dtype);

// The datasheet's memory bandwidth (bytes/s), the other roof of a kernel's roofline: H100 SXM
// 3.35 TB/s, H100 PCIe 2.0, H200 4.8, GH200 4.0, A100 2.0 (the 80 GB part; the 40 GB reads as it
// too). 0 for any other device and the CpuDevice.
double datasheet_memory_bandwidth(std::string_view device_name);

}  // namespace strata::gpu

// Model FLOPs utilisation for train_gpt's step line: the FLOPs a step needs (not counting the
// recompute of activation checkpointing) over the time it took, against a peak rate.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "gpu/device.h"
#include "model_spec.h"

namespace strata::train_gpt {

// FLOPs of one forward and backward per token: 6*N + 12*L*C*T (N parameters; the attention's
// matmuls at context T), the estimate of PaLM's appendix B that llm.c uses.
double flops_per_token(const ModelSpec& spec, int64_t seq);

// The device's matmul rate in FLOP/s for `dt` inputs: the best of a few square matmuls (256 on
// the CpuDevice, 4096 on a GPU) after a warm-up. Allocates and frees its buffers.
Result<double> measure_matmul_rate(gpu::Device& dev, DType dt);

// The peak rate per rank MFU is against: --peak-flops, or (rank 0, which says so) the measured
// matmul rate; 0 (no MFU column) when neither is known.
double peak_flops_of(double flag, gpu::Device& dev, DType dt, bool lead);

}  // namespace strata::train_gpt

// Model FLOPs utilisation for train_gpt's step line: the FLOPs a step needs (not counting the
// recompute of activation checkpointing) over the time it took, against a peak rate.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "gpu/device.h"
#include "model_spec.h"

namespace strata::train_gpt {

// FLOPs of one forward and backward per token: model/flops.h (llm.c's 6*N + 6*L*C*T).
double flops_per_token(const ModelSpec& spec, int64_t seq);

// The device's matmul rate in FLOP/s for `dt` inputs: the best of a few square matmuls (256 on
// the CpuDevice, 4096 on a GPU) after a warm-up. Allocates and frees its buffers.
Result<double> measure_matmul_rate(gpu::Device& dev, DType dt);

// The peak rate per rank MFU is against: --peak-flops, or (rank 0, which says so) the GPU's
// datasheet dense peak (gpu/peak_flops.h; the measured matmul rate said beside it), or the
// measured matmul rate where there is no datasheet (the CpuDevice, fp32); 0 (no MFU column)
// when none is known.
double peak_flops_of(double flag, gpu::Device& dev, DType dt, bool lead);

}  // namespace strata::train_gpt

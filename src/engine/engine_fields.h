// The engine's settings, one line each: the one table behind EngineConfig's field names, its
// single-value checks and its JSON exchange between ranks (config_exchange.h), and the enum by
// which messages and front ends name a field (engine_config.h: Field, ref(), render_fields()).
// A front end's own names for them (train_gpt: the flag and the DeepSpeed key) are a table of
// its own indexed by Field (examples/train_gpt/config_fields.cpp), checked to list every field.
//
// STRATA_ENGINE_FIELDS(X) calls X(Enum, member, accepted) once per field, in Field's order:
//   Enum      the Field enumerator;
//   member    the member's path in EngineConfig, which is also the field's name (`adam.lr`);
//   accepted  the values a field takes by itself: kAnyValue, or an Accepted range with the
//             words a refusal quotes (validate() checks the combinations).
// A field added to EngineConfig gets a line here; test_engine_config's round trip fails until
// it has one (every field of an unusual config must survive the JSON).
#pragma once

#include <limits>

namespace strata::engine {

// The closed range a number must lie in (NaN never does), and how a refusal says it.
struct Accepted {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  const char* words = nullptr;  // nullptr: any value (kAnyValue)
};
inline constexpr Accepted kAnyValue{};
inline constexpr Accepted kFraction{0.0, 1.0, "0..1"};
constexpr Accepted at_least(double lo, const char* words) {
  return {lo, std::numeric_limits<double>::infinity(), words};
}

// clang-format off
#define STRATA_ENGINE_FIELDS(X) \
  X(kZeroStage, zero.stage, (Accepted{0, 3, "0..3"})) \
  X(kPrecision, precision, kAnyValue) \
  X(kLossScale, loss_scaling.loss_scale, kAnyValue) \
  X(kOffloadOptimizer, optimizer.offload, kAnyValue) \
  X(kOptimizerNvmeFraction, optimizer.nvme_fraction, kFraction) \
  X(kGpuOptimizerFraction, optimizer.gpu_fraction, kFraction) \
  X(kOffloadParam, zero.offload_param, kAnyValue) \
  X(kParamGpuFraction, zero.param_gpu_fraction, kFraction) \
  X(kOffloadActivations, zero.offload_activations, kAnyValue) \
  X(kPrefetchDepth, zero.prefetch_depth, (Accepted{0, 64, "0..64 layers"})) \
  X(kBucketBytes, zero.bucket_bytes, kAnyValue) \
  X(kPersistenceThreshold, zero.persistence_threshold, at_least(0, "0 or more elements")) \
  X(kDelayedUpdate, optimizer.delayed_update_warmup, kAnyValue) \
  X(kSchedule, schedule.kind, kAnyValue) \
  X(kGradAccum, schedule.grad_accum, at_least(1, "1 or more micro-batches")) \
  X(kGradClip, optimizer.grad_clip, at_least(0, "0 (off) or more")) \
  X(kGpuMemoryLimit, storage.gpu_memory_limit, kAnyValue) \
  X(kHostMemoryLimit, storage.host_memory_limit, kAnyValue) \
  X(kNvmePath, storage.nvme_paths, kAnyValue) \
  X(kNvmeBlockSize, storage.nvme_block_size, kAnyValue) \
  X(kNvmeQueueDepth, storage.nvme_queue_depth, (Accepted{1, 4096, "1..4096"})) \
  X(kNvmeBufferCount, storage.nvme_buffer_count, (Accepted{1, 64, "1..64"})) \
  X(kLr, optimizer.adam.lr, kAnyValue) \
  X(kGradAccumDtype, schedule.grad_accum_dtype, kAnyValue) \
  X(kMicrobatchOrder, schedule.microbatch_order, kAnyValue) \
  X(kDeviceGradSum, schedule.device_grad_sum, kAnyValue) \
  X(kOffloadAuto, offload_auto, kAnyValue) \
  X(kBeta1, optimizer.adam.beta1, kAnyValue) \
  X(kBeta2, optimizer.adam.beta2, kAnyValue) \
  X(kEps, optimizer.adam.eps, kAnyValue) \
  X(kWeightDecay, optimizer.adam.weight_decay, kAnyValue) \
  X(kAdamMode, optimizer.adam.mode, kAnyValue) \
  X(kBiasCorrection, optimizer.adam.bias_correction, kAnyValue) \
  X(kDecayOn, optimizer.decay_on, kAnyValue) \
  X(kInitialScalePower, loss_scaling.initial_scale_power, kAnyValue) \
  X(kLossScaleWindow, loss_scaling.loss_scale_window, kAnyValue) \
  X(kHysteresis, loss_scaling.hysteresis, kAnyValue) \
  X(kMinLossScale, loss_scaling.min_loss_scale, kAnyValue) \
  X(kConsecutiveHysteresis, loss_scaling.consecutive_hysteresis, kAnyValue) \
  X(kCollectives, zero.collectives, kAnyValue)
// clang-format on

}  // namespace strata::engine

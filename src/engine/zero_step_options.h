// ZeroStepOptions: the settings of the ZeRO step (zero_step.h), as engine::Session derives them
// from an EngineConfig (session.cpp). Each field says what it sets and which EngineConfig field
// (or train_gpt flag, in docs/training.md) it comes from.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "engine/engine_config.h"
#include "engine/offload_step.h"
#include "nvme/swap_store.h"
#include "scheduler/executor.h"

namespace strata::engine {

struct ZeroStepOptions {
  OffloadStepOptions step;
  sched::ExecutorOptions executor;
  // Stages 2-3: the micro-batches' reduced gradient shards add up in fp32 on the host (the
  // optimizer then reads fp32 gradients); else in the model's dtype.
  bool fp32_grad_accum = false;
  // EngineConfig::schedule as it is. The segment-major order (microbatch_order kLayer, K =
  // grad_accum >= 2 micro-batches: micros_per_replay()) runs K micro-batches in one replay (every
  // run() takes K), every micro-batch through a checkpoint segment before the next segment, each
  // in its own model slot (Model::set_micro_slots), the backward of a segment micro-batch by
  // micro-batch in order, so the gradients add up in the order of one replay per micro-batch:
  // the same bits. Every stage (at 2-3 each micro-batch's gradient is reduced by itself, or with
  // device_grad_sum a block's gradients of the K micro-batches add up in one device buffer, a
  // tied head's part kept apart until the last embedding backward as at stages 0-1, and go down
  // and are reduced once per step) and checkpoint home (one offloaded checkpoint per segment and
  // micro-batch); not with the delayed update (EngineConfig::validate refuses it). Otherwise one
  // replay per micro-batch.
  ScheduleSettings schedule;
  int staging_slots = 3;  // pinned staging buffers for NVMe partitions (1..64)
  // zero.collectives kDevice: the communicator of device buffers (NCCL), of the host
  // communicator's ranks. Null: the host communicator, which only the CpuDevice accepts (its
  // device memory is host memory).
  comm::Communicator* device_comm = nullptr;
  // Test hook (fault injection): at this step, this rank's local gradient of layer 0 gets an
  // Inf in its first element before the reduction. 0: never.
  int64_t inject_inf_step = 0;
  // EngineConfig::zero as it is. bucket_bytes (stage >= 2: host gradient bytes awaiting
  // reduction) 0 means twice the largest block, and it is at least the largest block.
  //   zero.offload_param (param_home()), stage 3: the home of the sharded blocks' 16-bit shards.
  //   kPinned (cpu, the default): pinned host memory, the gathers' direct source.
  //   kNvme: the swap store (swap_store, keys shard_key_base + block): read into pinned staging
  //     ahead of each gather (up to prefetch_depth ahead, as the gathers), written after each
  //     update; the fp32 master is not read for it (only the update reads the master).
  //   kDevice (none): the device. One rank: the shard is the whole block, used in place (no
  //     gather, no upload). More ranks: with the collectives on the host it goes down into the
  //     gathered copy's slot, which is then all-gathered in place and uploaded; on the device it
  //     is all-gathered from where it is.
  //   zero.collectives: where the collectives run (engine_config.h Collectives; kDevice needs
  //     device_comm, or the CpuDevice).
  // Stages 0-2 keep parameters whole on the device: kNvme and a fraction are refused there (as
  // DeepSpeed's offload_param needs stage 3); kPinned and kDevice mean nothing below stage 3.
  //   zero.param_gpu_fraction: the share of the sharded blocks' elements whose shard stays on
  // the device anyway (kDevice home), chosen in forward order (shared block, layer 0, 1, ...),
  // each block taken while the running total, counting half of it, stays within the share. Only
  // with kPinned or kNvme.
  //   zero.offload_activations: the home of the kept layer inputs of every checkpoint segment
  // but the last (whose layers' activations stay resident through the backward). kPinned: each
  // goes down (d2h lane) as soon as the next layer's forward has read it, and comes back up one
  // segment ahead of the recompute that reads it; kNvme: on through pinned staging to the swap
  // store (nvme lane) and back the same way. The model must leave them to the caller
  // (block_storage(..., true)). kDevice: the model keeps them all.
  ZeroSettings zero;
  // EngineConfig::optimizer as it is (ZeroStep reads offload, gpu_fraction and
  // delayed_update_warmup; the update's own settings are the optimizer's and step's).
  //   optimizer.offload kDevice (none): the rank's fp32 master, m and v on the device
  //   (DeviceOptimizer),
  // updated there by Kernels::adam_step: the reduced gradient goes up, the new 16-bit values come
  // down to be all-gathered (stages 1-3) or are written into the model's block (stage 0).
  // Refused with an NVMe share of the state.
  //   optimizer.gpu_fraction: that share of the partitions (DeviceOptimizer::choose) is updated
  // on the device as above, the rest by the CPU Adam (offload kDevice: all of them). DeepSpeed's
  // offload_optimizer.ratio is the complement (the share updated on the CPU).
  //   optimizer.delayed_update_warmup (ZeRO-Offload's one-step delayed parameter update): from step
  //   warmup + 2 on,
  // the update of step n-1 (CPU Adam, gathers) runs during the forward and backward of step n,
  // which uses the parameters from before it; its new parameters go up after step n's last use
  // of each block and are seen by step n+1. Steps up to warmup + 1 are ordinary (each sees every
  // earlier update). -1: off. Stages 0-2 with the optimizer on the host (refused otherwise).
  OptimizerSettings optimizer;
  // The swap store of the NVMe homes: keys shard_key_base + block (shards) and
  // checkpoint_key_base + segment (checkpoints); engine::Session sets them (its key layout).
  nvme::SwapStore* swap_store = nullptr;
  uint64_t shard_key_base = uint64_t{1} << 40;
  uint64_t checkpoint_key_base = (uint64_t{1} << 40) + (uint64_t{1} << 24);
  // EngineConfig::storage.host_memory_limit: pinned host bytes this rank may use (the optimizer's
  // arena and staging, and the plan's pinned peak); 0: no limit. The plan is checked against it,
  // and against the device pool's limit, before the executor allocates anything
  // (engine/memory_budget.h).
  uint64_t host_memory_limit = 0;
};

}  // namespace strata::engine

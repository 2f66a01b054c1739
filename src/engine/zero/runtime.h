// zero::Runtime: what the ZeRO plan's tasks act on when they run. The task bodies capture a
// Runtime* (never the ZeroStep): the model, the optimizer (and its part on the device), the
// communicator, the swap store and its keys, the micro-batches of the replay, the gradient
// statistics, and the counters of the bytes moved. What a replay is asked to do comes with the
// replay (Replay, sched::TaskContext::args<Replay>()).
//
// Ownership: ZeroStep owns it (at a stable address: the plan's tasks hold its pointer) and
// borrows the model, optimizer and communicator it names. ZeroStep writes the batch before a
// replay and reads the counters and the statistics after it.
// Thread safety: a replay's tasks run on the lanes' threads at once. The lane counters are
// atomic; each traffic counter is touched by the tasks of one lane (comm, or link for the
// collectives on the device) and by the caller between replays; each statistics slot is written by
// one task (a block's check, or the exchange) before the norm reads it (the plan orders them).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "engine/device_optimizer.h"
#include "engine/offloaded_optimizer.h"
#include "engine/step_reports.h"
#include "gpu/device.h"
#include "model/model.h"
#include "nvme/swap_store.h"
#include "scheduler/lane.h"

namespace strata::engine::zero {

// What one replay of the plan does: ZeroStep::run() replays once per micro-batch (the
// segment-major plan: once for all), flush() once to apply a pending update alone.
struct Replay {
  int64_t step = 0;                // the training step (run()'s; flush(): the last)
  int micro = 0, micros = 1;       // the micro-batch replayed, of how many
  bool flushing = false;           // only the pending update (no compute, no gradient)
  int64_t update_step = 0;         // Adam's step count of the update it applies (0: none)
  float update_grad_scale = 1.0f;  // and its gradient multiplier
  bool last_micro() const { return micro + 1 == micros; }
};

// The transfer lanes whose bytes the tasks count (ZeroStep::last_lane_bytes()).
enum class Moved : uint8_t { kH2D, kD2H, kNvmeRead, kNvmeWrite };

// The swap store of the NVMe homes and its keys: shard_base + block for the stage-3 parameter
// shards, checkpoint_base + checkpoint for the offloaded activation checkpoints.
struct SwapKeys {
  nvme::SwapStore* store = nullptr;
  uint64_t shard_base = 0, checkpoint_base = 0;
  uint64_t shard(int64_t block) const { return shard_base + uint64_t(block); }
  uint64_t checkpoint(int64_t ck) const { return checkpoint_base + uint64_t(ck); }
};

// The gradient statistics of a step: per rank and block the sum of squares of the reduced
// shard and whether it holds a non-finite value (all-gathered as raw bits at stages 1-3), and
// what the norm task made of them.
struct GradStats {
  std::vector<double> slots;  // [rank][block][2]
  size_t blocks = 0;
  double sum = 0.0;
  bool finite = true;
  double* at(int rank, size_t block) { return &slots[(size_t(rank) * blocks + block) * 2]; }
};

class Runtime {
 public:
  Runtime(model::Model& model, OffloadedOptimizer& optimizer, comm::Communicator& comm,
          SwapKeys swap, int64_t inject_inf_step);

  model::Model& model;
  OffloadedOptimizer& opt;
  comm::Communicator& comm;
  // The collectives on device buffers (Collectives::kDevice; null otherwise): a communicator of
  // device buffers, or on the CpuDevice the host one. Same ranks as `comm`.
  comm::Communicator* dcomm = nullptr;
  std::optional<DeviceOptimizer> device_opt;  // the partitions updated on the device
  const SwapKeys swap;
  const int rank, ranks;
  // The replay's micro-batches (host int32, one B*T row block per micro-batch slot).
  std::vector<int32_t> tokens, targets;
  GradStats stats;
  // Test hook (ZeroStepOptions::inject_inf_step): at this step, this rank's local gradient of
  // layer 0 gets an Inf before its reduction. 0: never.
  const int64_t inject_inf_step;

  // Counters of one step: the tasks add, the step resets them before its replays and reads
  // them after.
  void moved(Moved lane, uint64_t bytes) {
    lanes_[size_t(lane)].fetch_add(bytes, std::memory_order_relaxed);
  }
  // The bytes `call` sends (the comm layer's textbook accounting), under `field`.
  void count(const comm::CollectiveCall& call, uint64_t ZeroTraffic::*field);
  // `call` on the device communicator, counted under `field` and as device-link bytes: enqueued
  // on `stream` (the link lane's) when the communicator is stream-ordered, else started and
  // waited for (stream null: the comm lane).
  Status on_device(const comm::CollectiveCall& call, uint64_t ZeroTraffic::*field,
                   gpu::Stream* stream);
  // Where the plan puts the collectives on device buffers: the link lane (a device stream,
  // ordered by events) when dcomm enqueues on streams (NCCL), else the comm lane.
  sched::Lane device_lane() const {
    return dcomm != nullptr && dcomm->stream_ordered() ? sched::Lane::kLink : sched::Lane::kComm;
  }
  void reset_counts();
  const ZeroTraffic& traffic() const { return traffic_; }
  ZeroLaneBytes lane_bytes() const;

 private:
  std::array<std::atomic<uint64_t>, 4> lanes_{};
  ZeroTraffic traffic_;
};

}  // namespace strata::engine::zero

// Session: the engine's front door. prepare() lays out a session of an EngineConfig before its
// model exists (the partitioning, the blocks the model holds on the device, the optimizer's
// partitions); from the config, a device, a communicator and a model built with that storage,
// create() assembles everything a training run needs, in the one order that works:
//   1. validate the config (EngineConfig::validate; the rank count against the schedule, the
//      precision against the model's);
//   2. open the swap store when a home is on NVMe, sized by the capacity formula below, with
//      the key layout below;
//   3. lay out the optimizer (its partitions: ZeroStep::optimizer_numel) and check its pinned
//      bytes against host_memory_limit before allocating them (memory_budget.h);
//   4. create the optimizer and load the fp32 masters from SessionInputs::init (every block,
//      also those the device does not hold);
//   5. let SessionInputs::restore load a checkpoint into the optimizer (resume);
//   6. create the step: the serial reference (Schedule::kSerial, one rank) or the ZeRO step over
//      the communicator (the plan, its budget checks, the executor), and give it the restored
//      scaling state.
// The session hands out what the step reports (TrainStep::memory_report, traffic_report); the
// planner (planner/session_prediction.h) predicts its step's time.
//
// plan_only (the planner, --plan) stops short of allocating: no swap store, an optimizer and a
// ZeRO step that only lay out (ZeroStep::plan_only), no masters.
//
// Swap store keys (one store per rank; ranks on one host share the directories): the optimizer
// partitions at rank << 32 + partition; the ZeRO step's stage-3 parameter shards at
// rank << 32 + 2^31 + block, its offloaded checkpoints at rank << 32 + 2^31 + 2^24 + segment.
// Capacity per rank: 12 bytes per optimizer element (fp32 master, m, v) plus 8 MiB per block of
// extent slack; with parameter shards on NVMe, their 16-bit bytes plus the same slack; with
// checkpoints on NVMe, each segment's checkpoint plus 8 MiB.
//
// Ownership: owns the swap store, the optimizer and the step; borrows the device, the
// communicator and the model, which must outlive it. Thread safety: none; one thread drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "engine/engine_config.h"
#include "engine/offloaded_optimizer.h"
#include "engine/serial_step.h"
#include "engine/train_step.h"
#include "engine/zero_step.h"
#include "model/model.h"
#include "nvme/swap_store.h"

namespace strata::engine {

struct SessionInputs {
  // Block b's initial fp32 values (every block of the model; the masters start from them).
  ZeroStep::ParamSource init;
  // Resuming: loads a checkpoint into the optimizer (after the masters, before the step) and
  // returns its scaling state; unset: a fresh run.
  std::function<Result<StepScaling::State>(OffloadedOptimizer&)> restore;
  // A swap store the caller owns (tests and benches that share one among sessions, one at a
  // time), used instead of opening one from config.nvme_paths; its capacity is the caller's.
  nvme::SwapStore* store = nullptr;
  // zero.collectives device: the communicator of device buffers (ZeroStepOptions::device_comm).
  comm::Communicator* device_comm = nullptr;
  cpu::PinnedPool* pool = nullptr;  // the optimizer's and the plan's pinned memory (null: default)
  bool plan_only = false;           // lay out only (above)
  int host_threads = 1;             // the CPU lane's threads (the CPU Adam and host passes)
  // Test hook (ZeroStepOptions::inject_inf_step).
  int64_t inject_inf_step = 0;
};

// What a session of a config needs before its model exists (Session::prepare).
struct SessionLayout {
  Partitioning parts;           // the model's blocks over the ranks (partition.h)
  model::BlockStorage storage;  // what the model holds on the device: build the model with it
  // This rank's optimizer partitions, elements each (partition p is block
  // partition_blocks()[p]: whole blocks at stage 0, the rank's shard at 1-3).
  std::vector<int64_t> optimizer_numel;
};

class Session {
 public:
  // The layout of a session of `config` over `ranks` for a model of these blocks (their
  // elements, in block order, the shared block last): the one call before the model is built.
  static Result<SessionLayout> prepare(const EngineConfig& config,
                                       const std::vector<int64_t>& block_numel, int ranks);
  // The swap store's capacity for this rank (the formula above); `numel`: its partitions.
  static uint64_t swap_capacity(const EngineConfig& config, const model::Model& model,
                                const std::vector<int64_t>& numel);
  // The store's allocation unit: 1 MiB, or the request size when larger.
  static uint64_t swap_extent(const EngineConfig& config);

  static Result<std::unique_ptr<Session>> create(const EngineConfig& config, gpu::Device& device,
                                                 comm::Communicator& comm, model::Model& model,
                                                 const SessionInputs& inputs);

  TrainStep& step() { return *step_; }
  const TrainStep& step() const { return *step_; }
  // The ZeRO step (its plan, memory and traffic reports, the prediction), or null when the
  // serial step runs.
  const ZeroStep* zero() const { return zero_; }
  ZeroStep* zero() { return zero_; }
  OffloadedOptimizer& optimizer() { return *optimizer_; }
  const OffloadedOptimizer& optimizer() const { return *optimizer_; }
  // The swap store in use (the session's own or SessionInputs::store), or null.
  nvme::SwapStore* store() const { return store_; }
  // The key layout above: optimizer partition p's state, block b's stage-3 parameter shard,
  // segment s's offloaded checkpoint, of `rank`.
  static uint64_t optimizer_key(int rank, size_t p);
  static uint64_t shard_key(int rank, int64_t b);
  static uint64_t checkpoint_key(int rank, int64_t s);
  const Partitioning& partitioning() const { return parts_; }
  const EngineConfig& config() const { return config_; }
  // This rank's optimizer partitions (elements each).
  const std::vector<int64_t>& partition_numel() const { return numel_; }

  // What the session was made with (the planner's calibration and prediction read them).
  const model::Model& model() const { return *model_; }
  comm::Communicator& communicator() const { return *comm_; }
  // The device collectives' communicator given (SessionInputs::device_comm), or null.
  comm::Communicator* device_communicator() const { return device_comm_; }
  int host_threads() const { return host_threads_; }

 private:
  Session() = default;
  EngineConfig config_;
  model::Model* model_ = nullptr;
  comm::Communicator* comm_ = nullptr;
  comm::Communicator* device_comm_ = nullptr;
  int host_threads_ = 1;
  Partitioning parts_;
  std::vector<int64_t> numel_;
  std::unique_ptr<nvme::SwapStore> own_store_;  // before the optimizer and the step: they use it
  nvme::SwapStore* store_ = nullptr;            // own_store_ or SessionInputs::store
  std::optional<OffloadedOptimizer> optimizer_;
  std::unique_ptr<TrainStep> step_;
  ZeroStep* zero_ = nullptr;  // step_ when it is the ZeRO step
};

}  // namespace strata::engine

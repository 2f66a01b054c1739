// ZeroStep: the ZeRO data-parallel training step (DESIGN.md §1, §4) over the ranks of a
// Communicator, as one scheduler plan built once and replayed every step. Every rank runs the
// same plan on its own micro-batch; the global batch is ranks x micro-batch, and the gradients
// are averaged over the ranks (their sum times 1/N, folded into Adam's gradient multiplier).
//
// Each block (a layer, or the shared block) is one flat 16-bit vector, cut into N shards by the
// comm layer's padding rule (partition.h). Per stage, what one rank keeps and what moves:
//   stage 0  params, grads and fp32 state whole. Gradients are all-reduced, done as its two
//            halves (reduce-scatter, then all-gather of the reduced shards); every rank runs
//            Adam on whole blocks.
//   stage 1  fp32 master/m/v: the rank's shard only. Gradients reduce-scattered into the whole
//            gradient buffer (kept whole); Adam on the shard; new 16-bit shards all-gathered.
//   stage 2  gradients sharded too: a block's gradient lives on the device only from its
//            backward to its transfer to pinned memory, and on the host only until it is
//            reduce-scattered into the rank's shard (bucket_bytes is the room the pinned budget
//            gives the gradients waiting for their reduction); Adam on the shard; new shards
//            all-gathered.
//   stage 3  parameters sharded too: the rank's 16-bit shard stays at its home (pinned host
//            memory by default; the device or NVMe: ZeroStepOptions::offload_param); a
//            block is all-gathered and uploaded just before its forward, and again before its
//            backward (for a checkpointed segment, before its recompute: the segment's layers
//            stay gathered until each one's backward, so recompute costs no extra gather), and
//            released after use. Blocks under the persistence threshold stay whole on the
//            device and are handled as at stage 2. The shared block is gathered once per step,
//            held from the embedding forward to the head backward (the embedding backward reads
//            no parameter). prefetch_depth bounds how many gathers run ahead of the compute.
// Traffic per rank per step, in 16-bit elements (bytes: twice that), Ψ = padded elements:
// stages 0-2: 2Ψ(N-1)/N (reduce-scatter + all-gather); stage 3: 3Ψ(N-1)/N for the
// non-persistent layers (two gathers and a reduce-scatter), 2Ψ(N-1)/N for the shared block and
// persistent ones; plus the gradient statistics (16 bytes per block per rank, all-gathered) and
// one float for the mean loss.
//
// Fixed reduction order (why every stage gives the same bits). Every stage reduces a block's
// gradient with the same reduce-scatter call (same block, count, dtype and rank count, in the
// same order on the comm lane); the backend's algorithm, and so each element's summation order,
// depends only on these, so the reduced 16-bit gradient has the same bits at every stage (stage
// 0 all-gathers exactly those shards). Adam is elementwise, so a shard's update does not depend
// on who computes it. The global norm is summed in a fixed order: per block (model order), per
// rank shard (rank order), each shard's sum of squares computed by cpu::grad_check over the
// shard's c elements (stage 0 computes all N itself; stages 1-3 all-gather them). With one rank
// that is the single-rank steps' order, so ZeroStep then matches SerialStep bit for bit.
//
// The update is rotated with clipping, fp16 or the device optimizer: run(n) ends after step n's
// reductions, gradient checks and norm; step n's Adam (and the gathers and uploads of the new
// parameters) runs at the start of run(n+1), where block b's first use waits only for block b's
// update. The decision (norm, clip, fp16 overflow: skip on every rank) is taken on the host from
// statistics every rank has, so every rank decides the same. Without them, each block's Adam
// (and its new parameters' gather and upload) runs as soon as its reduced gradient passed its
// own check, while the backward of the earlier layers goes on; a non-finite gradient then stops
// the step with an error on the rank that holds it (the caller ends the job: below). flush()
// applies a pending update and leaves the model's parameter blocks holding the whole current
// parameters (stage 3 gathers them), for evaluation or saving; it is collective (every rank calls
// it).
//
// Failures: a task error leaves the executor failed (every later run() returns it); the other
// ranks then wait in a collective this rank will not start: the caller ends the job with
// Communicator::abort (train_gpt does), and the comm watchdog bounds the wait anyway.
//
// Where: the plan is compiled by zero::compile (zero/plan/compile.h, in stages) from the step's
// zero::Layout; its tasks act on a zero::Runtime (zero/runtime.h) the step owns. zero_step.cpp
// creates, runs and flushes; zero_step_params.cpp holds the parameters outside the replays
// (masters, shard homes, gathers, the inference forward); zero_step_reports.cpp the reports.
//
// Ownership: borrows the model, optimizer and communicator (they must outlive it). Thread
// safety: none; run() from one thread. The communicator is used by the comm lane's worker during
// run()/flush() and by the calling thread between them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "cpu/pinned_memory.h"
#include "engine/device_optimizer.h"
#include "engine/engine_config.h"
#include "engine/offload_step.h"
#include "engine/offloaded_optimizer.h"
#include "engine/partition.h"
#include "engine/step_reports.h"
#include "engine/train_step.h"
#include "engine/zero/plan/compile.h"
#include "engine/zero/plan/layout.h"
#include "engine/zero/runtime.h"
#include "engine/zero_step_options.h"
#include "scheduler/cost_model.h"
#include "scheduler/executor.h"

namespace strata::engine {

class ZeroStep : public TrainStep {
 public:
  // The optimizer partitions one rank needs: partition p is block partition_blocks()[p], of the
  // block's numel at stage 0 and of its shard (padding included) at stages 1-3.
  static std::vector<int64_t> optimizer_numel(const Partitioning& parts, int stage);
  // Loads this rank's part of the parameters as the optimizer's fp32 masters (zero moments;
  // padding zero), rounded to the model's dtype as the device holds them. `source(b, r, host)`
  // writes elements [r.begin, r.end) of block b's fp32 values to host[0, r.end - r.begin); it is
  // asked for the rank's own elements only at stages 1-3 (so a rank reads only its part of a
  // checkpoint), whole blocks at stage 0. By default the model's device block
  // (download_params); a model without a block on the device needs a source (slices_of).
  using ParamSource = std::function<Status(int64_t block, model::ElementRange range, float* host)>;
  static Status load_masters(model::Model& model, OffloadedOptimizer& optimizer,
                             const Partitioning& parts, int stage, int rank,
                             const ParamSource& source = {});
  // The blocks the model must hold on the device at `stage`: parameters of the blocks that are
  // not sharded (all below stage 3; persistent ones at 3), gradients at stages 0-1.
  // offload_activations: the model leaves the checkpoints the engine moves to the caller.
  static model::BlockStorage block_storage(const Partitioning& parts, int stage,
                                           bool offload_activations = false);

  // `optimizer` as optimizer_numel(); every rank calls create (it is not collective).
  static Result<std::unique_ptr<ZeroStep>> create(model::Model& model,
                                                  OffloadedOptimizer& optimizer,
                                                  comm::Communicator& comm,
                                                  const ZeroStepOptions& options);
  // One step on this rank's micro-batches (host int32 [micro_batches*B*T], micro-batch k at
  // k*B*T); collective. With more than one micro-batch (gradient accumulation), the plan is
  // replayed once per micro-batch: at stages 0-1 the gradients add up in the model's blocks and
  // go down and are reduced after the last; at stages 2-3 each micro-batch's reduced shard is
  // added into the rank's gradient shard on the host (in the model's precision, as the device
  // adds them at 0-1). The update (rotated: the previous step's) runs once; the checks, the norm
  // and the decision follow the last micro-batch. The loss is the mean over micro-batches and
  // ranks; the norm is of the averaged gradient. Not with the delayed update.
  Result<StepResult> run(const int32_t* tokens, const int32_t* targets, int64_t step,
                         int micro_batches = 1) override;
  // Applies a pending update; then the model's parameter blocks (those on the device) hold the
  // whole current parameters on every rank. Collective.
  Status flush() override;
  // The learning rate of the next run()'s update (an LR schedule: the update of step n uses the
  // rate set before run(n), whenever it is applied). Unset: the optimizer's own.
  void set_lr(float lr) override { pending_.lr = lr; }
  // Adam's step count and the loss scaler (checkpoints: take it after flush(), restore it before
  // the first run()).
  StepScaling::State scaling_state() const override { return pending_.scaling.state(); }
  void restore_scaling(const StepScaling::State& s) override { pending_.scaling.restore(s); }
  // Inference forward of `tokens` (host int32 [B*T]) with the current parameters, gathering
  // each sharded block into a scratch device buffer in turn (after flush()); then the model's
  // logits_to_host() reads the logits, and with `targets` its mean_loss() the loss (computed on
  // the device). Collective.
  Status forward_inference(const int32_t* tokens, const int32_t* targets = nullptr) override;
  // Block b's whole current parameters as fp32 on the host (gathered when sharded; after
  // flush()). Collective when the block is sharded.
  Status gather_params(int64_t block, float* host) override;
  // What this rank holds (see ZeroMemory).
  ZeroMemory memory() const;

  // A step whose optimizer was created plan_only (the planner, --plan) stops after planning:
  // it has its plan and memory() but no executor, and run() and the rest are not to be called.
  // fit() is what the budget check said (a real create() fails with it).
  bool plan_only() const { return executor_ == nullptr; }
  const Status& fit() const { return fit_; }
  // The plan the executor replays (plan_only: the one it would).
  const sched::Plan& plan() const { return executor_ ? executor_->plan() : *plan_; }
  // The step time the cost model predicts for plan() (sched::simulate) in steady state (an
  // update applied); with K micro-batches the sum of K replays, each without the tasks that have
  // nothing to do in it (the update but in one, the reductions at stages 0-1, the checks and the
  // norm but in the last; the segment-major plan runs all K in one).
  Result<sched::Prediction> predict(const sched::Rates& rates, int micro_batches = 1) const;
  const sched::Executor* executor() const override { return executor_.get(); }
  // Whether the next steps record a trace (sched::Executor::set_trace): only traced steps pay
  // the stream callbacks.
  void set_trace(bool on) override { executor_->set_trace(on); }
  std::optional<ZeroMemory> memory_report() const override { return memory(); }
  std::optional<StepTraffic> traffic_report() const override {
    return StepTraffic{last_traffic(), expected_traffic(), last_lane_bytes()};
  }
  const Partitioning& partitioning() const { return layout_.parts; }
  int stage() const { return options_.zero.stage; }
  // Traffic of the last run() (measured from the communicator's counters).
  const ZeroTraffic& last_traffic() const { return last_.traffic; }
  // Transfer-lane bytes of the last run() (counted by the transfer tasks).
  ZeroLaneBytes last_lane_bytes() const { return last_.lanes; }
  // Where block b's 16-bit parameters live between uses: kDevice for blocks kept whole on the
  // device (stages 0-2, persistent blocks), else the shard's home.
  Home param_home(int64_t b) const { return layout_.home[size_t(b)]; }
  // Bytes of one 16-bit element; activation checkpoints stored on NVMe and the bytes of each.
  size_t dtype_bytes() const { return dtype_size(rt_->model.dtype()); }
  int64_t checkpoints_on_nvme() const {
    return options_.zero.offload_activations == Home::kNvme ? offloaded_checkpoints() : 0;
  }
  size_t checkpoint_bytes() const { return rt_->model.checkpoint_bytes(); }
  // The traffic theory for one step of K micro-batches (the figures above, from the
  // partitioning): the gradients' reduce-scatter once per micro-batch at stages 2-3 (once per
  // step at 0-1), the stage-3 gathers once per micro-batch in the micro-batch-major order and
  // once per step in the segment-major one, the rest once per step. Without K: the last run()'s.
  ZeroTraffic expected_traffic(int micro_batches) const;
  ZeroTraffic expected_traffic() const { return expected_traffic(last_.micros); }

 private:
  ZeroStep(model::Model& model, OffloadedOptimizer& optimizer, comm::Communicator& comm,
           const ZeroStepOptions& options)
      : options_(options),
        rt_(std::make_unique<zero::Runtime>(
            model, optimizer, comm,
            zero::SwapKeys{options.swap_store, options.shard_key_base, options.checkpoint_key_base},
            options.inject_inf_step)) {}
  // The update between run()s (rotated: the one run() computed and the next applies).
  struct Pending {
    int64_t step = 0;                   // the last run()'s step
    int64_t adam_step = 0;              // Adam's step count of the pending update (0: none)
    float grad_scale = 1.0f;            // and its gradient multiplier
    float lr = -1.0f, next_lr = -1.0f;  // set_lr(); of the pending update. Negative: the
                                        // optimizer's own
    StepScaling scaling;
  };
  // What the last run() measured.
  struct LastRun {
    ZeroTraffic traffic;
    ZeroLaneBytes lanes;
    int micros = 1;
  };
  // Outside the replays: forward_inference's device scratch (one gathered block and the shared
  // one; two offloaded checkpoints), a block gathered on the host, load_shard's pinned staging.
  struct Scratch {
    gpu::DeviceBuffer block, checkpoints;
    std::vector<std::byte> host;
    cpu::PinnedBuffer shard_io;
  };
  // The plan compiler's input (zero/plan/compile.h) from the options and the model.
  zero::CompileInput compile_input() const;
  // The tasks active in a replay of micro-batch `micro` of `micros`, with an update or not.
  std::vector<bool> active_tasks(int micro, int micros, bool update) const;
  Status check_budgets(const sched::Plan& plan) const;  // memory_budget.h, before the executor
  Status init_param_shards();  // stage 3: the rank's shards from the optimizer's masters
  // Block b's whole parameters into `dst` on the device (gathered when sharded), synchronously.
  Status gather_block(int64_t b, void* dst);
  Status gather_host(int64_t b);  // block b's shards all-gathered into scratch_.host
  Status gather_into_model();     // stage 3: whole parameters into the model's blocks
  // Block b's shard (stage 3) into / from host memory, wherever its home is (outside replays).
  Status load_shard(int64_t b, void* host);
  Status store_shard(int64_t b, const void* host);
  // The offloaded checkpoints of a step: one per offloaded segment (all but the last, when
  // offloaded) and micro-batch slot.
  int64_t offloaded_checkpoints() const {
    return offloaded_segments() * options_.schedule.micros_per_replay();
  }
  int64_t offloaded_segments() const {
    return options_.zero.offload_activations == Home::kDevice ? 0 : rt_->model.num_segments() - 1;
  }

  ZeroStepOptions options_;
  std::unique_ptr<zero::Runtime> rt_;  // what the plan's tasks act on (a stable address)
  zero::Layout layout_;                // blocks, shards, homes, stage, ranks
  zero::HostBuffers buffers_;          // the plan's step-long buffers (the shards' homes)
  zero::PlanNotes notes_;              // the plan's buffer kinds and tasks' replays
  std::unique_ptr<sched::Executor> executor_;
  std::optional<sched::Plan> plan_;  // plan_only
  Status fit_;
  Pending pending_;
  LastRun last_;
  Scratch scratch_;
};

// A ParamSource cutting the ranges from whole blocks: make(b) gives block b's fp32 values
// (e.g. model::init_block at a seed).
ZeroStep::ParamSource slices_of(std::function<std::vector<float>(int64_t block)> make);

}  // namespace strata::engine

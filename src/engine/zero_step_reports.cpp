// ZeroStep's reports: what the rank holds (memory()), the step time the cost model predicts
// (predict(), over the replays of a step), and the collectives' traffic theory.
#include <algorithm>

#include "engine/zero_step.h"

namespace strata::engine {

ZeroMemory ZeroStep::memory() const {
  ZeroMemory z;
  const sched::Plan& plan = this->plan();
  const int64_t es = static_cast<int64_t>(dtype_size(rt_->model.dtype()));
  int64_t pinned_homes = 0, device_kept = 0;
  for (size_t b = 0; b < layout_.parts.num_blocks(); ++b) {
    const int64_t shard = layout_.parts.block(b).shard_numel * es;
    if (layout_.sharded(int64_t(b))) {
      z.params16 += shard;
      if (layout_.home[b] == Home::kPinned) pinned_homes += shard;
      if (layout_.home[b] == Home::kDevice) z.params_device += shard;
      if (layout_.home[b] == Home::kNvme) z.params_nvme += shard;
    }
    if (layout_.grads_on_device(int64_t(b)) && options_.zero.stage >= 1) {
      // The reduced shard kept on the device for the device optimizer (stage 0: in the model's
      // gradient).
      const auto kept =
          static_cast<int64_t>(options_.zero.stage == 1 ? layout_.shard_bytes(int64_t(b))
                                                        : layout_.acc_shard_bytes(int64_t(b)));
      z.grads16 += kept;
      device_kept += kept;
    } else if (options_.zero.stage >= 2) {  // the reduced shard, in fp32 when the micro-batches
                                            // add so
      const int64_t acc = layout_.parts.block(b).shard_numel * (options_.fp32_grad_accum ? 4 : es);
      z.grads16 += acc;
      pinned_homes += acc;
    }
  }
  z.params16 += static_cast<int64_t>(rt_->model.param_bytes());
  z.params_device += static_cast<int64_t>(rt_->model.param_bytes());
  z.grads16 += static_cast<int64_t>(rt_->model.grad_bytes());
  z.grads_device = static_cast<int64_t>(rt_->model.grad_bytes()) + device_kept;
  int64_t elements = 0;
  for (size_t p = 0; p < rt_->opt.num_partitions(); ++p) elements += rt_->opt.numel(p);
  z.master = z.exp_avg = z.exp_avg_sq = 4 * elements;
  z.optimizer_nvme = static_cast<int64_t>(rt_->opt.nvme_state_bytes());
  z.optimizer_device = rt_->device_opt ? static_cast<int64_t>(rt_->device_opt->bytes()) : 0;
  z.device_activations = static_cast<int64_t>(rt_->model.device_bytes() - rt_->model.param_bytes() -
                                              rt_->model.grad_bytes());
  z.device_working = static_cast<int64_t>(plan.peak_bytes(sched::Tier::kDevice)) -
                     (z.params_device - static_cast<int64_t>(rt_->model.param_bytes())) -
                     device_kept;
  z.pinned_working = static_cast<int64_t>(plan.peak_bytes(sched::Tier::kPinnedHost)) - pinned_homes;
  // Each kind's own peak along the plan's order.
  auto peak = [&](zero::BufferKind kind, sched::Tier tier) {
    return static_cast<int64_t>(plan.peak_bytes_of([&](sched::BufferId id) {
      return notes_.kinds[size_t(id)] == kind && plan.buffer(id).tier == tier;
    }));
  };
  using sched::Tier;
  z.device_gathered = peak(zero::BufferKind::kGathered, Tier::kDevice);
  z.device_grads_in_flight = peak(zero::BufferKind::kGradBucket, Tier::kDevice);
  z.device_optimizer_io = peak(zero::BufferKind::kOptimizerIo, Tier::kDevice);
  z.pinned_gathered = peak(zero::BufferKind::kGathered, Tier::kPinnedHost);
  z.pinned_grads = peak(zero::BufferKind::kGradBucket, Tier::kPinnedHost) +
                   peak(zero::BufferKind::kGradWhole, Tier::kPinnedHost);
  z.pinned_params = peak(zero::BufferKind::kParamStaging, Tier::kPinnedHost);
  z.pinned_nvme_staging = peak(zero::BufferKind::kNvmeStaging, Tier::kPinnedHost);
  z.device_checkpoints = peak(zero::BufferKind::kCheckpoint, Tier::kDevice);
  z.pinned_checkpoints = peak(zero::BufferKind::kCheckpoint, Tier::kPinnedHost);
  if (options_.zero.offload_activations == Home::kNvme) {
    z.nvme_checkpoints =
        offloaded_checkpoints() * static_cast<int64_t>(rt_->model.checkpoint_bytes());
  }
  return z;
}

std::vector<bool> ZeroStep::active_tasks(int micro, int micros, bool update) const {
  std::vector<bool> on(notes_.when.size(), true);
  for (size_t t = 0; t < on.size(); ++t) {
    switch (notes_.when[t]) {
      case zero::RunsWhen::kEvery: break;
      case zero::RunsWhen::kUpdate: on[t] = update; break;
      case zero::RunsWhen::kNoUpdate: on[t] = !update; break;
      case zero::RunsWhen::kLastMicro: on[t] = micro + 1 == micros; break;
    }
  }
  return on;
}

Result<sched::Prediction> ZeroStep::predict(const sched::Rates& rates, int micro_batches) const {
  // The replays of a step in steady state (an update applied): one (the segment-major plan runs
  // every micro-batch in it), or one per micro-batch, the update with the first (rotated) or the
  // last, the middle ones alike.
  const int k = options_.schedule.micros_per_replay() > 1 ? 1 : std::max(1, micro_batches);
  sched::Prediction sum;
  auto add = [&](int micro, double times) -> Status {
    const bool update = layout_.rotate ? micro == 0 : micro + 1 == k;
    const std::vector<bool> on = active_tasks(micro, k, update);
    STRATA_ASSIGN_OR_RETURN(const sched::Prediction p, sched::simulate(plan(), rates, &on));
    sum.step_s += times * p.step_s;
    sum.exposed_s += times * p.exposed_s;
    for (int l = 0; l < sched::kNumLanes; ++l) sum.busy_s[l] += times * p.busy_s[l];
    for (int w = 0; w < sched::kNumWorkKinds; ++w) sum.work[w] += times * p.work[w];
    return ok_status();
  };
  STRATA_RETURN_IF_ERROR(add(0, 1.0));
  if (k > 2) STRATA_RETURN_IF_ERROR(add(1, double(k - 2)));
  if (k > 1) STRATA_RETURN_IF_ERROR(add(k - 1, 1.0));
  return sum;
}

ZeroTraffic ZeroStep::expected_traffic(int micro_batches) const {
  ZeroTraffic t;
  const uint64_t n = static_cast<uint64_t>(rt_->ranks);
  const uint64_t es = dtype_size(rt_->model.dtype());
  const auto k = static_cast<uint64_t>(std::max(1, micro_batches));
  const uint64_t reductions =
      options_.zero.stage >= 2 && !options_.schedule.device_grad_sum ? k : 1;
  const uint64_t gathers = options_.schedule.micros_per_replay() > 1 ? 1 : k;
  for (size_t b = 0; b < layout_.parts.num_blocks(); ++b) {
    const BlockPartition& bp = layout_.parts.block(b);
    const uint64_t shard_bytes = static_cast<uint64_t>(bp.shard_numel) * es;
    const uint64_t one = (n - 1) * shard_bytes;  // a ring reduce-scatter or all-gather
    t.grad_reduce_scatter += reductions * one;
    if (options_.zero.stage == 0) t.grad_all_gather += one;
    // Stage 3: gathers for the forward and the backward instead of one after the update; the
    // shared block is gathered once (its forward copy serves the head backward too).
    if (layout_.sharded(int64_t(b))) {
      t.param_all_gather += gathers * (int64_t(b) != rt_->model.num_layers() ? 2 : 1) * one;
    } else if (options_.zero.stage >= 1) {
      t.param_all_gather += one;
    }
  }
  // Statistics: 2 doubles per block per rank, all-gathered (stages 1-3); the loss: an
  // all-reduce of one float (the textbook formula's integer division).
  // The collectives on the device: all but the statistics and the loss (on the host).
  if (layout_.on_device) t.device_link = t.total();
  if (options_.zero.stage >= 1) t.stats += (n - 1) * layout_.parts.num_blocks() * 16;
  t.stats += 2 * (n - 1) * 4 / n;
  return t;
}

}  // namespace strata::engine

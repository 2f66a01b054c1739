#include "run_setup.h"

#include <algorithm>

#include "core/dtype.h"
#include "engine/memory_budget.h"

namespace strata::train_gpt {

Result<std::unique_ptr<nvme::SwapStore>> open_swap_store(const Flags& f,
                                                         const std::vector<std::string>& nvme_dirs,
                                                         const model::GptModel& gpt,
                                                         const std::vector<int64_t>& numel) {
  const bool nvme_acts = f.offload_activations == "nvme";
  if (f.plan || !(f.offload_optimizer == "nvme" || f.offload_param == "nvme" || nvme_acts)) {
    return std::unique_ptr<nvme::SwapStore>();
  }
  nvme::SwapStoreOptions so;
  so.dirs = nvme_dirs;
  so.block_bytes = f.nvme_block_size;
  so.extent_bytes = std::max<uint64_t>(so.extent_bytes, f.nvme_block_size);
  so.queue.queue_depth = static_cast<uint32_t>(f.nvme_queue_depth);
  // This rank's partitions (its shards from stage 1), 12 bytes per element, and its 16-bit
  // parameter shards, plus slack for whole extents.
  const auto nb = static_cast<uint64_t>(gpt.num_blocks());
  uint64_t elements = 0;
  for (int64_t n : numel) elements += static_cast<uint64_t>(n);
  so.capacity_bytes = 12ull * elements + (8ull << 20) * nb;
  if (f.offload_param == "nvme") {
    so.capacity_bytes += dtype_size(gpt.config().dtype) * elements + (8ull << 20) * nb;
  }
  if (nvme_acts) {  // the checkpoints of every segment but the last
    so.capacity_bytes +=
        static_cast<uint64_t>(gpt.num_segments()) * (gpt.checkpoint_bytes() + (8ull << 20));
  }
  return nvme::SwapStore::open(so);
}

cpu::AdamHyper adam_hyper(const Flags& f) {
  cpu::AdamHyper hyper;
  hyper.lr = f.lr;
  hyper.weight_decay = f.weight_decay;
  hyper.beta1 = f.beta1;
  hyper.beta2 = f.beta2;
  hyper.eps = f.eps;
  return hyper;
}

engine::OffloadedOptimizerOptions optimizer_options(const Flags& f, nvme::SwapStore* store,
                                                    int rank) {
  engine::OffloadedOptimizerOptions oo;
  oo.nvme_fraction = f.offload_optimizer == "nvme" ? f.nvme_fraction : 0.0;
  oo.store = store;
  // The plan stages through its own buffers; the serial step through the optimizer's.
  oo.staging_slots = f.schedule == "planned" ? 1 : f.nvme_buffer_count;
  oo.key_base = static_cast<uint64_t>(rank) << 32;
  oo.plan_only = f.plan;
  return oo;
}

Status check_optimizer_pinned(const Flags& f, const std::vector<int64_t>& numel,
                              const engine::OffloadedOptimizerOptions& oo) {
  if (f.host_memory_limit == 0 || f.plan) return ok_status();
  engine::PinnedNeeds pn;
  pn.optimizer_state = engine::OffloadedOptimizer::split(numel, oo.nvme_fraction).host_bytes;
  pn.optimizer_staging =
      engine::OffloadedOptimizer::pinned_bytes_needed(numel, oo) - pn.optimizer_state;
  pn.optimizer_at = [&numel, oo](double fraction) {
    engine::OffloadedOptimizerOptions o = oo;
    o.nvme_fraction = fraction;
    return engine::OffloadedOptimizer::pinned_bytes_needed(numel, o);
  };
  pn.optimizer_fraction = oo.nvme_fraction;
  pn.optimizer_now = pn.optimizer_state + pn.optimizer_staging;
  return engine::check_pinned_budget(pn, f.host_memory_limit);
}

}  // namespace strata::train_gpt

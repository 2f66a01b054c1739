// train_gpt's engine storage as the flags describe it: the swap store (its directories, request
// size, queue depth and the capacity this rank's NVMe homes need), the CPU Adam's hyper-
// parameters, the offloaded optimizer's options, and the optimizer's share of
// --host-memory-limit checked before its arena is allocated.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "cpu/cpu_adam.h"
#include "engine/offloaded_optimizer.h"
#include "flags.h"
#include "model/gpt.h"
#include "nvme/swap_store.h"

namespace strata::train_gpt {

// The swap store when an NVMe home is asked for (and not --plan), else null. `numel`: this
// rank's optimizer partitions.
Result<std::unique_ptr<nvme::SwapStore>> open_swap_store(const Flags& f,
                                                         const std::vector<std::string>& nvme_dirs,
                                                         const model::GptModel& gpt,
                                                         const std::vector<int64_t>& numel);

cpu::AdamHyper adam_hyper(const Flags& f);

engine::OffloadedOptimizerOptions optimizer_options(const Flags& f, nvme::SwapStore* store,
                                                    int rank);

// --host-memory-limit against the optimizer's pinned bytes (kOutOfMemory with the advice of
// engine/memory_budget.h); nothing to check without a limit or under --plan.
Status check_optimizer_pinned(const Flags& f, const std::vector<int64_t>& numel,
                              const engine::OffloadedOptimizerOptions& oo);

}  // namespace strata::train_gpt

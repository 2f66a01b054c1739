// OffloadedOptimizer: fp32 master params and Adam moments (m, v) for a list of flat
// partitions, a configurable share of which lives on NVMe (DESIGN.md --optimizer-nvme-fraction)
// and the rest in one pinned host arena. step() updates every partition with CpuAdam; for the
// NVMe-resident ones it is pipelined: read(i+1) || CPU Adam(i) || write(i-1).
//
// Layout: each partition's state is one block [params | m | v] of 12 * numel bytes, in the host
// arena or under swap key key_base + index. Partitions go to NVMe in index order until the NVMe
// share of elements reaches the fraction (rounded to the nearest partition).
//
// Staging bound: NVMe partitions pass through `staging_slots` pinned buffers of
// 12 * max(numel of an NVMe partition) bytes each (rounded up to 4 KiB), i.e.
// staging_bytes() = staging_slots * round_up(12 * max_nvme_numel, 4096). With the default 3
// slots and 64M-element partitions that is 2.25 GiB; choose the partition size to fit RAM.
// Nothing else is pinned for NVMe state.
//
// Results are bit-identical to one in-RAM CpuAdam::step over the same data, whatever the
// fraction: Adam is elementwise and each partition gets the same hyper-parameters and step.
//
// Ownership: owns the host arena and staging buffers; the SwapStore is borrowed and must
// outlive this object. Thread safety: none; one thread calls step()/load()/read_state(). The
// exception is a checkpoint in progress (set_hold): its writer thread reads the partitions'
// state (host_state, read_partition) while updates run, each update waiting for its partition.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu/cpu_adam.h"
#include "cpu/pinned_memory.h"
#include "engine/decay_ranges.h"
#include "engine/partition_hold.h"
#include "nvme/swap_store.h"

namespace strata::engine {

struct OffloadedOptimizerOptions {
  double nvme_fraction = 0.0;        // share of elements on NVMe, 0..1
  nvme::SwapStore* store = nullptr;  // required when any partition is on NVMe
  cpu::PinnedPool* pool = nullptr;   // default_pinned_pool() when null
  // Pinned staging buffers for NVMe partitions: step() needs >= 3 (read-ahead, compute,
  // write-behind); 1 is enough for a caller that drives the partitions itself (the ZeRO step
  // stages through its own budgeted buffers) and uses only load()/read_state().
  int staging_slots = 3;
  uint64_t key_base = 0;         // swap keys are key_base + partition index
  bool register_staging = true;  // register staging buffers as io_uring fixed buffers
  // The layout only (the planner, --plan): nothing is allocated or written; the sizes are those
  // a real create() would have, and every call that touches the state is refused.
  bool plan_only = false;
};

// Gradient and 16-bit output of one partition for one step.
struct PartitionGrad {
  const void* grads = nullptr;  // numel elements of grad_dtype
  DType grad_dtype = DType::kF32;
  void* out16 = nullptr;  // optional: updated params as out_dtype
  DType out_dtype = DType::kBF16;
};

class OffloadedOptimizer {
 public:
  static Result<OffloadedOptimizer> create(std::vector<int64_t> partition_numel, cpu::CpuAdam adam,
                                           OffloadedOptimizerOptions options);

  // Bytes of pinned staging for `slots` slots and NVMe partitions of at most max_numel elements.
  static uint64_t staging_bound_bytes(int slots, int64_t max_numel);
  // Where create() puts the partitions (the layout rule above), without allocating anything.
  struct Split {
    std::vector<bool> on_nvme;
    std::vector<uint64_t> host_offset;  // in the host arena
    uint64_t host_bytes = 0, nvme_bytes = 0;
    int64_t max_nvme_numel = 0;
  };
  static Split split(const std::vector<int64_t>& partition_numel, double nvme_fraction);
  // The pinned bytes create() would allocate: the host arena and the staging.
  static uint64_t pinned_bytes_needed(const std::vector<int64_t>& partition_numel,
                                      const OffloadedOptimizerOptions& options);

  // Sets partition i's state (synchronously; m or v may be null for zeros).
  Status load(size_t i, const float* params, const float* exp_avg, const float* exp_avg_sq);
  // Copies partition i's state out (synchronously).
  Status read_state(size_t i, float* params, float* exp_avg, float* exp_avg_sq);

  // One optimizer step over all partitions; grads.size() must equal num_partitions().
  Status step(std::span<const PartitionGrad> grads, const cpu::AdamStep& step);

  // --- One partition at a time (the planned step drives these as tasks of its lanes) ---
  // Bytes of partition i's state [params | m | v] (12 per element).
  uint64_t state_bytes(size_t i) const { return 12 * static_cast<uint64_t>(numel_[i]); }
  // NVMe partitions: read the state into / write it from `staging` (4 KiB aligned, pinned,
  // state_bytes(i) long), asynchronously. Order them: read, step_partition, write.
  nvme::IoHandle read_partition(size_t i, void* staging) const;
  nvme::IoHandle write_partition(size_t i, const void* staging) const;
  // Adam on partition i: its state is in the host arena (RAM partitions; staging null) or in
  // `staging` (NVMe partitions, after read_partition). The same arithmetic as step().
  Status step_partition(size_t i, void* staging, const PartitionGrad& grad,
                        const cpu::AdamStep& step) const;
  // Partition i's fp32 master parameters (in the host arena, or in `staging` for NVMe ones).
  const float* master_params(size_t i, const void* staging) const;
  // A RAM partition's state [params | m | v] in the host arena (null for NVMe partitions).
  const std::byte* host_state(size_t i) const;

  // While a checkpoint captures the state (engine/checkpoint.h): every call that changes
  // partition i (step, step_partition, load) first waits until `hold` releases i. Null: none.
  // Set it between steps (no update running); the hold must outlive its use here.
  void set_hold(const PartitionHold* hold) { hold_ = hold; }

  size_t num_partitions() const { return numel_.size(); }
  int64_t numel(size_t i) const { return numel_[i]; }
  bool on_nvme(size_t i) const { return on_nvme_[i]; }
  uint64_t staging_bytes() const { return slot_bytes_ * uint64_t(slot_count_); }
  uint64_t host_state_bytes() const { return host_bytes_; }
  uint64_t nvme_state_bytes() const { return nvme_bytes_; }
  nvme::SwapStore* store() const { return options_.store; }
  const OffloadedOptimizerOptions& options() const { return options_; }
  const cpu::CpuAdam& adam() const { return adam_; }
  cpu::CpuAdam& adam() { return adam_; }
  // Weight decay on part of partition i only (decay_ranges.h; default: all of it).
  void set_decayed(size_t i, DecayRanges ranges) { decayed_[i] = std::move(ranges); }
  const DecayRanges& decayed(size_t i) const { return decayed_[i]; }

 private:
  OffloadedOptimizer(cpu::CpuAdam adam) : adam_(std::move(adam)) {}
  uint64_t key(size_t i) const { return options_.key_base + i; }
  cpu::AdamBuffers buffers_at(std::byte* base, size_t i, const PartitionGrad& g) const;
  // CpuAdam's step on partition i's buffers, the decay on its decayed ranges only.
  Status adam_step(size_t i, const cpu::AdamBuffers& b, const cpu::AdamStep& step) const;
  Status drain(std::vector<nvme::IoHandle>& handles);

  cpu::CpuAdam adam_;
  OffloadedOptimizerOptions options_;
  std::vector<int64_t> numel_;
  std::vector<DecayRanges> decayed_;  // by partition
  std::vector<bool> on_nvme_;
  std::vector<uint64_t> host_offset_;  // byte offset in host_arena_ (RAM partitions)
  cpu::PinnedBuffer host_arena_;
  std::vector<cpu::PinnedBuffer> slots_;
  uint64_t slot_bytes_ = 0;
  int slot_count_ = 0;
  const PartitionHold* hold_ = nullptr;
  void wait_hold(size_t i) const {
    if (hold_ != nullptr) hold_->wait(i);
  }
  uint64_t host_bytes_ = 0;
  uint64_t nvme_bytes_ = 0;
  Status refuse_plan_only() const;  // kConfig when options_.plan_only
};

}  // namespace strata::engine

#include "engine/offloaded_optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/log.h"
#include "engine/engine_config.h"

namespace strata::engine {

namespace {
constexpr uint64_t kPage = 4096;
uint64_t round_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }
uint64_t state_bytes_of(int64_t numel) { return 12 * static_cast<uint64_t>(numel); }
}  // namespace

uint64_t OffloadedOptimizer::staging_bound_bytes(int slots, int64_t max_numel) {
  return static_cast<uint64_t>(slots) * round_up(state_bytes_of(max_numel), kPage);
}

OffloadedOptimizer::Split OffloadedOptimizer::split(const std::vector<int64_t>& partition_numel,
                                                    double nvme_fraction) {
  int64_t total = 0;
  for (int64_t n : partition_numel) total += n;
  const double target = nvme_fraction * static_cast<double>(total);
  Split s;
  int64_t nvme_numel = 0;
  for (int64_t n : partition_numel) {
    const bool nvme = static_cast<double>(nvme_numel) + 0.5 * static_cast<double>(n) <= target;
    s.on_nvme.push_back(nvme);
    s.host_offset.push_back(nvme ? 0 : s.host_bytes);
    if (nvme) {
      nvme_numel += n;
      s.max_nvme_numel = std::max(s.max_nvme_numel, n);
      s.nvme_bytes += state_bytes_of(n);
    } else {
      s.host_bytes += round_up(state_bytes_of(n), 64);
    }
  }
  return s;
}

uint64_t OffloadedOptimizer::pinned_bytes_needed(const std::vector<int64_t>& partition_numel,
                                                 const OffloadedOptimizerOptions& options) {
  const Split s = split(partition_numel, options.nvme_fraction);
  return s.host_bytes +
         (s.max_nvme_numel > 0 ? staging_bound_bytes(options.staging_slots, s.max_nvme_numel) : 0);
}

Result<OffloadedOptimizer> OffloadedOptimizer::create(std::vector<int64_t> partition_numel,
                                                      cpu::CpuAdam adam,
                                                      OffloadedOptimizerOptions options) {
  if (!(options.nvme_fraction >= 0.0 && options.nvme_fraction <= 1.0)) {
    return make_error(ErrorCode::kConfig, ref(Field::kOptimizerNvmeFraction), " ",
                      options.nvme_fraction, " is not accepted (0..1)");
  }
  if (options.staging_slots < 1 || options.staging_slots > 64) {
    return make_error(ErrorCode::kConfig, "optimizer staging slots ", options.staging_slots,
                      " is not accepted (1..64; step() needs 3)");
  }
  OffloadedOptimizer opt(std::move(adam));
  opt.options_ = options;
  cpu::PinnedPool& pool = options.pool != nullptr ? *options.pool : cpu::default_pinned_pool();
  for (int64_t n : partition_numel) {
    if (n <= 0) {
      return make_error(ErrorCode::kConfig, "optimizer partition of ", n,
                        " elements is not accepted (> 0)");
    }
  }
  Split sp = split(partition_numel, options.nvme_fraction);
  opt.on_nvme_ = std::move(sp.on_nvme);
  opt.host_offset_ = std::move(sp.host_offset);
  opt.nvme_bytes_ = sp.nvme_bytes;
  const int64_t max_nvme = sp.max_nvme_numel;
  const uint64_t host_bytes = sp.host_bytes;
  opt.numel_ = std::move(partition_numel);
  opt.decayed_.assign(opt.numel_.size(), std::nullopt);
  if (max_nvme > 0 && options.store == nullptr && !options.plan_only) {
    return make_error(ErrorCode::kConfig, "optimizer state on NVMe needs a swap store (",
                      ref(Field::kNvmePath), ")");
  }
  opt.host_bytes_ = host_bytes;
  if (max_nvme > 0) {
    opt.slot_bytes_ = round_up(state_bytes_of(max_nvme), kPage);
    opt.slot_count_ = options.staging_slots;
  }
  if (options.plan_only) return opt;
  STRATA_ASSIGN_OR_RETURN(opt.host_arena_, pool.allocate(host_bytes));
  if (max_nvme > 0) {
    std::vector<nvme::BufferRegion> regions;
    for (int s = 0; s < options.staging_slots; ++s) {
      STRATA_ASSIGN_OR_RETURN(auto buf, pool.allocate(opt.slot_bytes_));
      regions.push_back(nvme::BufferRegion{buf.data(), buf.mapped_bytes()});
      opt.slots_.push_back(std::move(buf));
    }
    if (options.register_staging) STRATA_RETURN_IF_ERROR(options.store->register_buffers(regions));
    // Every NVMe partition starts as zeros on disk, so step() can read it.
    std::memset(opt.slots_[0].data(), 0, opt.slot_bytes_);
    for (size_t i = 0; i < opt.numel_.size(); ++i) {
      if (opt.on_nvme_[i]) {
        STRATA_RETURN_IF_ERROR(
            options.store->write(opt.key(i), opt.slots_[0].data(), state_bytes_of(opt.numel_[i]))
                .wait());
      }
    }
  }
  STRATA_LOG(kInfo, "offloaded optimizer: "
                        << opt.numel_.size() << " partitions, " << opt.nvme_bytes_
                        << " state bytes on NVMe, " << host_bytes << " in host RAM, staging "
                        << opt.staging_bytes() << " bytes (" << options.staging_slots << " slots)");
  return opt;
}

cpu::AdamBuffers OffloadedOptimizer::buffers_at(std::byte* base, size_t i,
                                                const PartitionGrad& g) const {
  const int64_t n = numel_[i];
  auto* p = reinterpret_cast<float*>(base);
  cpu::AdamBuffers b;
  b.params = p;
  b.exp_avg = p + n;
  b.exp_avg_sq = p + 2 * n;
  b.grads = g.grads;
  b.grad_dtype = g.grad_dtype;
  b.out16 = g.out16;
  b.out_dtype = g.out_dtype;
  b.numel = n;
  return b;
}

Status OffloadedOptimizer::adam_step(size_t i, const cpu::AdamBuffers& b,
                                     const cpu::AdamStep& step) const {
  if (!decayed_[i]) return adam_.step(b, step);
  STRATA_ASSIGN_OR_RETURN(const cpu::AdamConstants k, adam_.constants(step));
  const cpu::AdamConstants plain = cpu::without_decay(k);
  const size_t gsize = dtype_size(b.grad_dtype), osize = dtype_size(b.out_dtype);
  return for_each_decay_segment(decayed_[i], b.numel, [&](int64_t begin, int64_t end, bool decay) {
    cpu::AdamBuffers seg = b;
    seg.params += begin;
    seg.exp_avg += begin;
    seg.exp_avg_sq += begin;
    seg.grads = static_cast<const std::byte*>(b.grads) + size_t(begin) * gsize;
    if (b.out16 != nullptr) seg.out16 = static_cast<std::byte*>(b.out16) + size_t(begin) * osize;
    seg.numel = end - begin;
    return adam_.update(seg, decay ? k : plain);
  });
}

Status OffloadedOptimizer::refuse_plan_only() const {
  if (!options_.plan_only) return ok_status();
  return make_error(ErrorCode::kConfig, "the optimizer was created for planning only (no state)");
}

Status OffloadedOptimizer::load(size_t i, const float* params, const float* exp_avg,
                                const float* exp_avg_sq) {
  STRATA_RETURN_IF_ERROR(refuse_plan_only());
  if (i >= numel_.size()) return make_error(ErrorCode::kConfig, "partition ", i, " out of range");
  wait_hold(i);
  const size_t bytes = 4 * static_cast<size_t>(numel_[i]);
  std::byte* base = on_nvme_[i] ? slots_[0].bytes() : host_arena_.bytes() + host_offset_[i];
  auto put = [&](size_t part, const float* src) {
    if (src != nullptr) {
      std::memcpy(base + part * bytes, src, bytes);
    } else {
      std::memset(base + part * bytes, 0, bytes);
    }
  };
  put(0, params);
  put(1, exp_avg);
  put(2, exp_avg_sq);
  if (!on_nvme_[i]) return ok_status();
  return options_.store->write(key(i), base, 3 * bytes).wait();
}

Status OffloadedOptimizer::read_state(size_t i, float* params, float* exp_avg, float* exp_avg_sq) {
  STRATA_RETURN_IF_ERROR(refuse_plan_only());
  if (i >= numel_.size()) return make_error(ErrorCode::kConfig, "partition ", i, " out of range");
  const size_t bytes = 4 * static_cast<size_t>(numel_[i]);
  std::byte* base = on_nvme_[i] ? slots_[0].bytes() : host_arena_.bytes() + host_offset_[i];
  if (on_nvme_[i]) STRATA_RETURN_IF_ERROR(options_.store->read(key(i), base, 3 * bytes).wait());
  if (params != nullptr) std::memcpy(params, base, bytes);
  if (exp_avg != nullptr) std::memcpy(exp_avg, base + bytes, bytes);
  if (exp_avg_sq != nullptr) std::memcpy(exp_avg_sq, base + 2 * bytes, bytes);
  return ok_status();
}

Status OffloadedOptimizer::drain(std::vector<nvme::IoHandle>& handles) {
  Status first;
  for (auto& h : handles) {
    if (h.valid()) {
      Status st = h.wait();
      if (first.ok() && !st.ok()) first = std::move(st);
      h = nvme::IoHandle();
    }
  }
  return first;
}

nvme::IoHandle OffloadedOptimizer::read_partition(size_t i, void* staging) const {
  if (i >= numel_.size() || !on_nvme_[i]) {
    return nvme::IoHandle::failed(
        make_error(ErrorCode::kInternal, "read_partition(", i, "): not an NVMe partition"));
  }
  return options_.store->read(key(i), staging, state_bytes(i));
}

nvme::IoHandle OffloadedOptimizer::write_partition(size_t i, const void* staging) const {
  if (i >= numel_.size() || !on_nvme_[i]) {
    return nvme::IoHandle::failed(
        make_error(ErrorCode::kInternal, "write_partition(", i, "): not an NVMe partition"));
  }
  return options_.store->write(key(i), staging, state_bytes(i));
}

const float* OffloadedOptimizer::master_params(size_t i, const void* staging) const {
  return on_nvme_[i] ? static_cast<const float*>(staging)
                     : reinterpret_cast<const float*>(host_arena_.bytes() + host_offset_[i]);
}

const std::byte* OffloadedOptimizer::host_state(size_t i) const {
  return on_nvme_[i] ? nullptr : host_arena_.bytes() + host_offset_[i];
}

Status OffloadedOptimizer::step_partition(size_t i, void* staging, const PartitionGrad& grad,
                                          const cpu::AdamStep& step) const {
  if (i >= numel_.size() || on_nvme_[i] != (staging != nullptr)) {
    return make_error(ErrorCode::kInternal, "step_partition(", i,
                      "): staging must be given exactly for NVMe partitions");
  }
  wait_hold(i);
  std::byte* base =
      on_nvme_[i] ? static_cast<std::byte*>(staging) : host_arena_.bytes() + host_offset_[i];
  Status st = adam_step(i, buffers_at(base, i, grad), step);
  if (!st.ok()) return st.with_context("optimizer partition " + std::to_string(i));
  return st;
}

Status OffloadedOptimizer::step(std::span<const PartitionGrad> grads, const cpu::AdamStep& step) {
  STRATA_RETURN_IF_ERROR(refuse_plan_only());
  if (grads.size() != numel_.size()) {
    return make_error(ErrorCode::kConfig, "optimizer step got ", grads.size(), " gradients for ",
                      numel_.size(), " partitions");
  }
  std::vector<size_t> nvme_parts;
  for (size_t i = 0; i < numel_.size(); ++i) {
    if (on_nvme_[i]) nvme_parts.push_back(i);
  }
  if (!nvme_parts.empty() && slots_.size() < 3) {
    return make_error(ErrorCode::kConfig, "OffloadedOptimizer::step needs 3 staging slots, it has ",
                      slots_.size(), " (step the partitions one by one instead)");
  }
  const size_t num_slots = slots_.size();
  // reads[s] / writes[s]: the operation in flight on slot s. Every exit path drains both, so no
  // I/O is left running into a buffer after step() returns.
  std::vector<nvme::IoHandle> reads(num_slots), writes(num_slots);
  auto fail = [&](Status st) {
    (void)drain(reads);
    (void)drain(writes);
    return st;
  };
  const size_t lookahead = num_slots >= 3 ? num_slots - 2 : 1;
  auto issue_read = [&](size_t j) -> Status {
    const size_t s = j % num_slots;
    if (writes[s].valid()) {
      STRATA_RETURN_IF_ERROR(writes[s].wait());  // slot s held partition j - num_slots
      writes[s] = nvme::IoHandle();
    }
    const size_t i = nvme_parts[j];
    reads[s] = options_.store->read(key(i), slots_[s].data(), state_bytes_of(numel_[i]));
    return ok_status();
  };
  for (size_t j = 0; j < std::min(lookahead, nvme_parts.size()); ++j) {
    if (Status st = issue_read(j); !st.ok()) return fail(st);
  }
  // Host-RAM partitions run while the first reads are in flight.
  for (size_t i = 0; i < numel_.size(); ++i) {
    if (on_nvme_[i]) continue;
    wait_hold(i);
    if (Status st =
            adam_step(i, buffers_at(host_arena_.bytes() + host_offset_[i], i, grads[i]), step);
        !st.ok()) {
      return fail(st.with_context("optimizer partition " + std::to_string(i)));
    }
  }
  for (size_t j = 0; j < nvme_parts.size(); ++j) {
    const size_t s = j % num_slots;
    const size_t i = nvme_parts[j];
    // Queue the next read before waiting for this one, so the disk always has the next
    // partition to work on (its slot's write-behind was queued earlier, so waiting for it first
    // costs nothing).
    Status st;
    if (j + lookahead < nvme_parts.size()) {
      if (st = issue_read(j + lookahead); !st.ok()) return fail(st);
    }
    st = reads[s].wait();
    reads[s] = nvme::IoHandle();
    if (!st.ok()) return fail(st.with_context("optimizer partition " + std::to_string(i)));
    wait_hold(i);  // before the write-behind replaces what a checkpoint may still read
    st = adam_step(i, buffers_at(slots_[s].bytes(), i, grads[i]), step);
    if (!st.ok()) return fail(st.with_context("optimizer partition " + std::to_string(i)));
    writes[s] = options_.store->write(key(i), slots_[s].data(), state_bytes_of(numel_[i]));
  }
  return drain(writes);
}

}  // namespace strata::engine

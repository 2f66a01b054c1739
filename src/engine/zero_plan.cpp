// ZeroStep::build_plan: the ZeRO step as one scheduler plan (zero_step.h describes what it
// does; this file is how the tasks, buffers, dependencies and budgets say it).
#include <algorithm>
#include <cstring>
#include <string>

#include "core/check.h"
#include "engine/zero_step.h"

namespace strata::engine {

namespace {
uint64_t round_page(uint64_t n) { return (n + 4095) / 4096 * 4096; }
uint64_t round_device(uint64_t n) { return (n + 255) / 256 * 256; }
// Lanes of ZeroStep::moved().
constexpr int kH2D = 0, kD2H = 1, kNvmeRead = 2, kNvmeWrite = 3;

// +Inf as one element of `dt` at `at`.
void write_inf(void* at, DType dt) {
  const uint32_t f32 = 0x7F800000u;
  const uint16_t f16 = 0x7C00u, bf16 = 0x7F80u;
  if (dt == DType::kF32) std::memcpy(at, &f32, 4);
  if (dt == DType::kF16) std::memcpy(at, &f16, 2);
  if (dt == DType::kBF16) std::memcpy(at, &bf16, 2);
}
}  // namespace

Result<sched::Plan> ZeroStep::build_plan() {
  using sched::BufferId;
  using sched::Lane;
  using sched::TaskContext;
  using sched::TaskId;
  using sched::Tier;
  model::GptModel& m = model_;
  const int stage = options_.stage;
  const int64_t layers = m.config().layers;
  const DType dt = m.config().dtype;
  const size_t es = dtype_size(dt);
  const size_t nb = blocks_.size();
  const int rank = rank_, ranks = ranks_;
  auto name = [&](int64_t b) {
    return b == layers ? std::string("shared") : "layer " + std::to_string(b);
  };
  auto numel = [&](int64_t b) { return parts_.block(size_t(b)).numel; };
  auto shard = [&](int64_t b) { return parts_.block(size_t(b)).shard_numel; };
  auto padded_bytes = [&](int64_t b) { return static_cast<size_t>(shard(b) * ranks) * es; };
  auto shard_bytes = [&](int64_t b) { return static_cast<size_t>(shard(b)) * es; };
  auto count = [this](const comm::CollectiveCall& call, uint64_t ZeroTraffic::*field) {
    counting_.*field += comm::textbook_bytes(call, rank_, ranks_).sent;
  };
  sched::Plan plan;
  buffer_kind_.clear();
  auto add_buffer = [&](Kind kind, std::string buffer_name, Tier tier, uint64_t bytes,
                        bool initially_valid = false) {
    buffer_kind_.push_back(kind);
    return plan.add_buffer(std::move(buffer_name), tier, bytes, initially_valid);
  };

  // Pinned host buffers. gfull: a block's whole gradient (padded), kept for the step at stages
  // 0-1 (the next run's update reads it), held from its transfer to its reduction at 2-3, where
  // gshard keeps the reduced shard. pbuf: the new parameters (padded; the rank's shard is
  // written by Adam, then all-gathered), or at stage 3 the rank's parameter shard itself.
  std::vector<BufferId> gfull(nb), gshard(nb, -1);
  pbuf_.assign(nb, -1);
  dshard_.assign(nb, -1);
  uint64_t pinned = 0, in_flight = 0, device_homes = 0;
  size_t largest = 0;
  uint64_t largest_moving = 0, largest_nvme = 0;  // shards not homed in pinned memory; on NVMe
  // A shard homed elsewhere than pinned memory passes through pbuf after its update only.
  auto transient = [this](int64_t b) {
    return sharded_params(b) && home_[size_t(b)] != Home::kPinned;
  };
  for (size_t b = 0; b < nb; ++b) {
    const int64_t bb = int64_t(b);
    largest = std::max(largest, padded_bytes(bb));
    gfull[b] = add_buffer(stage <= 1 ? Kind::kGradWhole : Kind::kGradBucket, "grad " + name(bb),
                          Tier::kPinnedHost, padded_bytes(bb),
                          /*initially_valid=*/stage <= 1);
    if (stage >= 2) {
      gshard[b] =
          add_buffer(Kind::kHome, "grad shard " + name(bb), Tier::kPinnedHost, shard_bytes(bb),
                     /*initially_valid=*/true);
      pinned += round_page(shard_bytes(bb));
    } else {
      pinned += round_page(padded_bytes(bb));
    }
    const bool sharded = sharded_params(bb);
    if (transient(bb)) {
      pbuf_[b] = add_buffer(Kind::kParamStaging, "new param shard " + name(bb), Tier::kPinnedHost,
                            shard_bytes(bb));
      largest_moving = std::max<uint64_t>(largest_moving, round_page(shard_bytes(bb)));
      if (home_[b] == Home::kNvme) {
        largest_nvme = std::max<uint64_t>(largest_nvme, round_page(shard_bytes(bb)));
      }
      if (home_[b] == Home::kDevice) {
        dshard_[b] = add_buffer(Kind::kHome, "param shard " + name(bb) + " (device)", Tier::kDevice,
                                shard_bytes(bb), /*initially_valid=*/true);
        device_homes += round_device(shard_bytes(bb));
      }
      continue;
    }
    pbuf_[b] = add_buffer(sharded ? Kind::kHome : Kind::kParamStaging,
                          sharded ? "param shard " + name(bb) : "params " + name(bb),
                          Tier::kPinnedHost, sharded ? shard_bytes(bb) : padded_bytes(bb),
                          /*initially_valid=*/sharded);
    pinned += round_page(sharded ? shard_bytes(bb) : padded_bytes(bb));
  }
  if (stage >= 2) {
    const uint64_t bucket = options_.bucket_bytes == 0 ? 2 * largest : options_.bucket_bytes;
    in_flight += std::max<uint64_t>(bucket, round_page(largest));
  }

  // The update of the previous step (rotated), in forward order: NVMe reads from the start of
  // the step, Adam per partition, the new shards all-gathered (stages 1-3, whole blocks) and
  // uploaded. first_use[b] waits for `ready[b]`.
  std::vector<TaskId> ready(nb, -1);
  std::vector<TaskId> grad_reader(nb, -1);  // by block: the update's task that reads its gradient
  std::vector<size_t> part_of(nb);          // block -> partition
  for (size_t p = 0; p < nb; ++p) part_of[size_t(blocks_[p])] = p;
  uint64_t slot_bytes = 0;
  // The order the optimizer visits the partitions: forward order when rotated (the next forward
  // needs them that way), backward order otherwise (the gradients arrive that way).
  std::vector<size_t> visit;
  const bool delayed = options_.delayed_update_warmup >= 0;
  // Delayed, the new parameters go up after the backward's last use of each block: backward
  // order too.
  for (size_t k = 0; k < nb; ++k) visit.push_back(rotate_ && !delayed ? nb - 1 - k : k);
  std::vector<BufferId> staging(nb, -1);
  std::vector<TaskId> read(nb, -1), state_written(nb, -1);
  // Transient new shards (stage 3, homed off pinned memory): by partition, the task that
  // acquires one (Adam, or the device optimizer's download) and the one that releases it.
  std::vector<TaskId> shard_acquirer(nb, -1), shard_home(nb, -1);
  for (size_t p : visit) {
    if (!opt_.on_nvme(p)) continue;
    const std::string n = name(blocks_[p]);
    staging[p] =
        add_buffer(Kind::kNvmeStaging, "state " + n, Tier::kPinnedHost, opt_.state_bytes(p));
    const BufferId buf = staging[p];
    read[p] = plan.add("read state " + n, Lane::kNvme, [this, p, buf](const TaskContext& c) {
      if (update_step_ == 0) return ok_status();
      moved(kNvmeRead, opt_.state_bytes(p));
      return opt_.read_partition(p, c.buffer(buf)).wait();
    });
    plan.acquire(read[p], buf);
    plan.writes(read[p], buf);
    slot_bytes = std::max(slot_bytes, round_page(opt_.state_bytes(p)));
  }
  // The new parameters of a block kept whole on the device: after `after` wrote the rank's part
  // into pbuf, all-gathered (stages 1-3) and uploaded into the model's block.
  auto add_params_up = [&](int64_t b, TaskId after) {
    const BufferId u = pbuf_[size_t(b)];
    TaskId before_up = after;
    if (stage >= 1) {
      const size_t c16 = static_cast<size_t>(shard(b));
      before_up = plan.add("gather params " + name(b), Lane::kComm,
                           [this, u, c16, dt, count, rank, es](const TaskContext& c) -> Status {
                             if (update_step_ == 0) return ok_status();
                             auto* base = static_cast<std::byte*>(c.buffer(u));
                             comm::CollectiveCall call;
                             call.kind = comm::CollectiveKind::kAllGather;
                             call.send = base + static_cast<size_t>(rank) * c16 * es;
                             call.recv = base;
                             call.count = c16;
                             call.dtype = dt;
                             count(call, &ZeroTraffic::param_all_gather);
                             return comm_.start(call).wait();
                           },
                           {after});
      plan.reads(before_up, u);
      plan.writes(before_up, u);
    }
    const size_t bytes = static_cast<size_t>(numel(b)) * es;
    const TaskId up = plan.add("params up " + name(b), Lane::kH2D,
                               [this, &m, b, u, bytes](const TaskContext& c) {
                                 if (update_step_ == 0) return ok_status();
                                 moved(kH2D, bytes);
                                 return c.stream->copy(m.param_block(b), c.buffer(u), bytes,
                                                       gpu::CopyKind::kHostToDevice);
                               },
                               {before_up});
    plan.reads(up, u);
    return up;
  };
  uint64_t largest_opt = 0;  // device optimizer: its largest partition (device bytes)
  // Device optimizer: partition p's reduced gradient up (h2d) into a device buffer. Added for
  // every partition before any new parameters go up, so that the in-order h2d lane does not
  // hold a gradient behind the previous block's whole update.
  std::vector<TaskId> grad_up(nb, -1);
  std::vector<BufferId> grad_up_buf(nb, -1);
  auto add_grad_up = [&](size_t p, std::vector<TaskId> deps) {
    const int64_t b = blocks_[p];
    const BufferId g = stage >= 2 ? gshard[size_t(b)] : gfull[size_t(b)];
    const size_t grad_off = stage == 1 ? static_cast<size_t>(rank) * shard_bytes(b) : 0;
    const size_t bytes = static_cast<size_t>(opt_.numel(p)) * es;
    largest_opt = std::max<uint64_t>(largest_opt, (bytes + 255) / 256 * 256);
    const BufferId gdev =
        add_buffer(Kind::kOptimizerIo, "grad up " + name(b), Tier::kDevice, bytes);
    const TaskId gup = plan.add(
        "grad up " + name(b), Lane::kH2D,
        [this, g, gdev, grad_off, bytes](const TaskContext& c) {
          if (update_step_ == 0) return ok_status();
          moved(kH2D, bytes);
          return c.stream->copy(c.buffer(gdev),
                                static_cast<const std::byte*>(c.buffer(g)) + grad_off, bytes,
                                gpu::CopyKind::kHostToDevice);
        },
        std::move(deps));
    plan.acquire(gup, gdev);
    plan.reads(gup, g);
    plan.writes(gup, gdev);
    grad_up[p] = gup;
    grad_up_buf[p] = gdev;
  };
  // Stage 3: the new shard of block b, written into pbuf by `after`, to its home (pinned: it is
  // there already); returns the task after which it is there.
  auto finish_shard = [&](int64_t b, TaskId after) -> TaskId {
    const Home home = home_[size_t(b)];
    if (home == Home::kPinned) return after;
    const BufferId u = pbuf_[size_t(b)], d = dshard_[size_t(b)];
    const size_t bytes = shard_bytes(b);
    const TaskId t =
        home == Home::kDevice
            ? plan.add("param shard up " + name(b), Lane::kH2D,
                       [this, u, d, bytes](const TaskContext& c) -> Status {
                         if (update_step_ == 0) return ok_status();
                         moved(kH2D, bytes);
                         return c.stream->copy(c.buffer(d), c.buffer(u), bytes,
                                               gpu::CopyKind::kHostToDevice);
                       },
                       {after})
            : plan.add("write param shard " + name(b), Lane::kNvme,
                       [this, u, b, bytes](const TaskContext& c) -> Status {
                         if (update_step_ == 0) return ok_status();
                         moved(kNvmeWrite, bytes);
                         return options_.swap_store->write(shard_key(b), c.buffer(u), bytes).wait();
                       },
                       {after});
    plan.reads(t, u);
    plan.release(t, u);
    if (d >= 0) plan.writes(t, d);
    return t;
  };
  // The update of partition p after `deps`; returns the task after which block b's new
  // parameters are where its next use reads them.
  auto add_update = [&](size_t p, std::vector<TaskId> deps) -> TaskId {
    const int64_t b = blocks_[p];
    const bool sharded = sharded_params(b);
    const BufferId g = stage >= 2 ? gshard[size_t(b)] : gfull[size_t(b)];
    const BufferId u = pbuf_[size_t(b)];
    const BufferId st = staging[p];
    // Where this rank's gradient and new parameters sit in those buffers.
    const size_t grad_off = stage == 1 ? static_cast<size_t>(rank) * shard_bytes(b) : 0;
    const size_t out_off = stage >= 1 && !sharded ? static_cast<size_t>(rank) * shard_bytes(b) : 0;
    const int64_t opt_numel = opt_.numel(p);
    if (read[p] >= 0) deps.push_back(read[p]);
    const bool on_device = device_opt_ && device_opt_->on_device(p);
    if (on_device && ranks == 1 && stage == 0) {
      // One rank at stage 0: the gradient is the model's own (a one-rank reduction is the
      // identity), still in its block when the rotated update runs before "zero grads".
      return plan.add(
          "adam " + name(b) + " (device)", Lane::kCompute,
          [this, &m, p, b, dt](const TaskContext& c) -> Status {
            if (update_step_ == 0) return ok_status();
            return device_opt_->update(*c.stream, opt_, p, m.grad_block(b), m.param_block(b), dt,
                                       cpu::AdamStep{update_step_, update_grad_scale_});
          },
          deps);
    }
    if (on_device) {
      // The rank's reduced gradient up; Adam on the compute lane (before any forward: the lane
      // runs in order); the new values into the model's block (stage 0) or down into pbuf.
      const size_t bytes = static_cast<size_t>(opt_numel) * es;
      if (grad_up[p] < 0) add_grad_up(p, deps);
      const TaskId gup = grad_up[p];
      const BufferId gdev = grad_up_buf[p];
      const BufferId odev =
          stage >= 1 ? add_buffer(Kind::kOptimizerIo, "new params " + name(b), Tier::kDevice, bytes)
                     : -1;
      const TaskId dadam =
          plan.add("adam " + name(b) + " (device)", Lane::kCompute,
                   [this, &m, p, b, gdev, odev, dt](const TaskContext& c) -> Status {
                     if (update_step_ == 0) return ok_status();
                     return device_opt_->update(*c.stream, opt_, p, c.buffer(gdev),
                                                odev >= 0 ? c.buffer(odev) : m.param_block(b), dt,
                                                cpu::AdamStep{update_step_, update_grad_scale_});
                   },
                   {gup});
      plan.reads(dadam, gdev);
      plan.release(dadam, gdev);
      if (odev < 0) return dadam;  // stage 0: the model's block is updated in place
      plan.acquire(dadam, odev);
      plan.writes(dadam, odev);
      const TaskId down =
          plan.add("new params down " + name(b), Lane::kD2H,
                   [this, u, odev, out_off, bytes](const TaskContext& c) {
                     if (update_step_ == 0) return ok_status();
                     moved(kD2H, bytes);
                     return c.stream->copy(static_cast<std::byte*>(c.buffer(u)) + out_off,
                                           c.buffer(odev), bytes, gpu::CopyKind::kDeviceToHost);
                   },
                   {dadam});
      plan.reads(down, odev);
      plan.release(down, odev);
      if (transient(b)) plan.acquire(down, u);
      plan.writes(down, u);
      if (transient(b)) {
        shard_acquirer[p] = down;
        shard_home[p] = finish_shard(b, down);
        return shard_home[p];
      }
      return sharded ? finish_shard(b, down) : add_params_up(b, down);
    }
    const TaskId adam = plan.add(
        "adam " + name(b), Lane::kCpu,
        [this, p, g, u, st, grad_off, out_off, opt_numel, dt](const TaskContext& c) -> Status {
          if (update_step_ == 0) return ok_status();
          void* state = st >= 0 ? c.buffer(st) : nullptr;
          auto* out = static_cast<std::byte*>(c.buffer(u)) + out_off;
          PartitionGrad pg;
          pg.grads = static_cast<const std::byte*>(c.buffer(g)) + grad_off;
          pg.grad_dtype = dt;
          pg.out16 = dt == DType::kF32 ? nullptr : out;
          pg.out_dtype = dt;
          STRATA_RETURN_IF_ERROR(
              opt_.step_partition(p, state, pg, cpu::AdamStep{update_step_, update_grad_scale_}));
          if (dt == DType::kF32) {
            std::memcpy(out, opt_.master_params(p, state), static_cast<size_t>(opt_numel) * 4);
          }
          return ok_status();
        },
        deps);
    plan.reads(adam, g);
    if (transient(b)) plan.acquire(adam, u);
    plan.writes(adam, u);
    grad_reader[size_t(b)] = adam;
    if (st >= 0) {
      plan.reads(adam, st);
      plan.writes(adam, st);
      const TaskId write = plan.add("write state " + name(b), Lane::kNvme,
                                    [this, p, st](const TaskContext& c) {
                                      if (update_step_ == 0) return ok_status();
                                      moved(kNvmeWrite, opt_.state_bytes(p));
                                      return opt_.write_partition(p, c.buffer(st)).wait();
                                    },
                                    {adam});
      plan.reads(write, st);
      plan.release(write, st);
      state_written[p] = write;
    }
    // Stage 3: the new shard goes home; it is gathered with the block's next forward.
    if (transient(b)) {
      shard_acquirer[p] = adam;
      shard_home[p] = finish_shard(b, adam);
      return shard_home[p];
    }
    return sharded ? finish_shard(b, adam) : add_params_up(b, adam);
  };
  if (device_opt_ && !(ranks == 1 && stage == 0)) {
    for (size_t p : visit) {
      if (device_opt_->on_device(p)) add_grad_up(p, {});
    }
  }
  if (rotate_) {
    for (size_t p : visit) ready[size_t(blocks_[p])] = add_update(p, {});
  }

  // The compute ops of a step, in order, with the gathered parameter copies they use (stage 3:
  // phase 0 = the forward copy, 1 = the backward copy of a block) and the gradients they write.
  struct Op {
    std::string name;
    std::function<Status(gpu::Stream&, const TaskContext&)> fn;
    std::vector<std::pair<int64_t, int>> uses;  // (block, phase) gathered copies
    int64_t first_use_of = -1;                  // a resident block whose update it must see
    int64_t zero_grad = -1;                     // stage >= 2: acquires and zeroes block's grad
    int64_t grad_done = -1;                     // the block's gradient is complete after it
  };
  std::vector<Op> ops;
  // Device buffers: gathered copies (stage 3) and per-block gradients (stages 2-3).
  std::vector<BufferId> gathered_dev[2], gathered_host[2];
  for (auto* v : {&gathered_dev[0], &gathered_dev[1], &gathered_host[0], &gathered_host[1]}) {
    v->assign(nb, -1);
  }
  std::vector<BufferId> dgrad(nb, -1);
  for (size_t b = 0; b < nb; ++b) {
    const int64_t bb = int64_t(b);
    if (stage >= 2) {
      dgrad[b] = add_buffer(Kind::kGradBucket, "grad " + name(bb) + " (device)", Tier::kDevice,
                            static_cast<size_t>(numel(bb)) * es);
    }
    if (!gathered(bb)) continue;
    for (int ph = 0; ph < 2; ++ph) {
      const std::string suffix = ph == 0 ? " (forward)" : " (backward)";
      gathered_host[ph][b] = add_buffer(Kind::kGathered, "gathered " + name(bb) + suffix,
                                        Tier::kPinnedHost, padded_bytes(bb));
      gathered_dev[ph][b] =
          add_buffer(Kind::kGathered, "gathered " + name(bb) + suffix + " (device)", Tier::kDevice,
                     static_cast<size_t>(numel(bb)) * es);
    }
  }
  // Parameter and gradient pointers of block b for an op.
  auto params = [this, &m, gathered_dev](int64_t b, int ph, const TaskContext& c) -> const void* {
    if (gathered(b)) return c.buffer(gathered_dev[ph][size_t(b)]);
    return sharded_params(b) ? c.buffer(dshard_[size_t(b)]) : m.param_block(b);
  };
  auto grads = [&m, dgrad](int64_t b, const TaskContext& c) -> void* {
    return dgrad[size_t(b)] >= 0 ? c.buffer(dgrad[size_t(b)]) : m.grad_block(b);
  };
  auto use = [this](int64_t b, int ph) {
    return sharded_params(b) ? std::vector<std::pair<int64_t, int>>{{b, ph}}
                             : std::vector<std::pair<int64_t, int>>{};
  };
  const int64_t L = layers;
  ops.push_back({"zero grads", [&m, stage](gpu::Stream& s, const TaskContext&) -> Status {
                   if (stage >= 2) return ok_status();
                   for (int64_t b = 0; b < m.num_blocks(); ++b) {
                     STRATA_RETURN_IF_ERROR(s.memset(
                         m.grad_block(b), 0,
                         static_cast<size_t>(m.block_numel(b)) * dtype_size(m.config().dtype)));
                   }
                   return ok_status();
                 }});
  ops.push_back({"set batch", [this](gpu::Stream& s, const TaskContext&) {
                   return model_.set_batch(s, tokens_.data(), targets_.data());
                 }});
  ops.push_back({"embedding forward",
                 [&m, params, L](gpu::Stream& s, const TaskContext& c) {
                   return m.embedding_forward(s, params(L, 0, c));
                 },
                 use(L, 0), L});
  for (int64_t l = 0; l < L; ++l) {
    ops.push_back({"forward " + std::to_string(l),
                   [&m, params, l](gpu::Stream& s, const TaskContext& c) {
                     return m.layer_forward(s, l, params(l, 0, c));
                   },
                   use(l, 0), l});
  }
  ops.push_back({"head forward",
                 [&m, params, L](gpu::Stream& s, const TaskContext& c) {
                   return m.head_forward(s, params(L, 0, c));
                 },
                 use(L, 0)});
  ops.push_back({"head backward",
                 [&m, params, grads, L](gpu::Stream& s, const TaskContext& c) {
                   return m.head_backward(s, params(L, 0, c), grads(L, c));
                 },
                 use(L, 0), -1, stage >= 2 ? L : -1});
  std::vector<size_t> last_read(nb, 0);  // by block: the op that reads its parameters last
  last_read[size_t(L)] = ops.size() - 1;
  const int64_t last_seg = m.num_segments() - 1;
  for (int64_t seg = last_seg; seg >= 0; --seg) {
    if (seg != last_seg) {
      for (int64_t l = m.segment_begin(seg); l < m.segment_end(seg); ++l) {
        ops.push_back({"recompute " + std::to_string(l),
                       [&m, params, l](gpu::Stream& s, const TaskContext& c) {
                         return m.layer_recompute(s, l, params(l, 1, c));
                       },
                       use(l, 1)});
      }
    }
    for (int64_t l = m.segment_end(seg) - 1; l >= m.segment_begin(seg); --l) {
      ops.push_back({"backward " + std::to_string(l),
                     [&m, params, grads, l](gpu::Stream& s, const TaskContext& c) {
                       return m.layer_backward(s, l, params(l, 1, c), grads(l, c));
                     },
                     use(l, 1), -1, stage >= 2 ? l : -1, l});
      last_read[size_t(l)] = ops.size() - 1;
    }
  }
  ops.push_back({"embedding backward",
                 [&m, grads, L](gpu::Stream& s, const TaskContext& c) {
                   return m.embedding_backward(s, grads(L, c));
                 },
                 // The embedding gradient is a scatter-add of the output gradient: it reads no
                 // parameter, so the shared block needs no backward gather.
                 {},
                 -1,
                 -1,
                 L});

  // Gather events (stage 3): one per (block, phase), in the order of first use.
  struct Gather {
    int64_t block;
    int phase;
    size_t first = 0, last = 0;  // ops
    TaskId upload = -1;
  };
  std::vector<Gather> gathers;
  auto find_gather = [&gathers](int64_t b, int ph) {
    for (size_t k = 0; k < gathers.size(); ++k) {
      if (gathers[k].block == b && gathers[k].phase == ph) return k;
    }
    return gathers.size();
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    for (const auto& [b, ph] : ops[i].uses) {
      if (!gathered(b)) continue;
      const size_t k = find_gather(b, ph);
      if (k == gathers.size()) {
        gathers.push_back({b, ph, i, i});
      } else {
        gathers[k].last = i;
      }
    }
  }
  std::vector<TaskId> op_task(ops.size(), -1);
  size_t emitted = 0;                               // gathers emitted so far
  std::vector<std::pair<size_t, TaskId>> deferred;  // (op, gather that waits for it)
  const size_t depth = static_cast<size_t>(options_.prefetch_depth);
  auto emit_gather = [&](size_t k) {
    Gather& gt = gathers[k];
    const int64_t b = gt.block;
    const int ph = gt.phase;
    const BufferId gh = gathered_host[ph][size_t(b)], gd = gathered_dev[ph][size_t(b)];
    const size_t c16 = static_cast<size_t>(shard(b));
    const Home home = home_[size_t(b)];
    const std::string what = name(b) + (ph == 0 ? " (forward)" : " (backward)");
    std::vector<TaskId> deps;
    // Rotated, with the shard on NVMe: the forward gathers the new shard straight from the
    // update's staging (pbuf; its write home then waits for this gather), so the forward's read
    // runs only in a replay without an update (the first). Otherwise the update's new shard must
    // be home first.
    const size_t p = part_of[size_t(b)];
    const bool from_staging = rotate_ && home == Home::kNvme && ph == 0 && shard_acquirer[p] >= 0;
    if (ready[size_t(b)] >= 0 && !from_staging) deps.push_back(ready[size_t(b)]);
    // At most `depth` gathers ahead of the one in use: wait for the release of gather k-depth-1.
    // A gather still needed after this one's first use (a checkpointed segment's backward
    // copies stay from its recompute to each layer's backward): wait for its first use instead,
    // so that no gather starts more than `depth` ahead of the compute (without any wait, every
    // backward gather's NVMe read would start with the step and hold its staging throughout).
    if (k > depth) {
      const Gather& prev = gathers[k - depth - 1];
      const size_t after = prev.last < gt.first ? prev.last : prev.first;
      if (op_task[after] >= 0) {
        deps.push_back(op_task[after]);
      } else {
        deferred.emplace_back(after, -1);  // that op is added later
      }
    }
    // The rank's shard: in pinned memory (pbuf), read from NVMe into pinned staging, or down
    // from the device into its slot of the gathered copy (gathered in place).
    BufferId sh = pbuf_[size_t(b)];
    size_t send_off = 0;
    TaskId fetch = -1;
    const size_t sbytes = shard_bytes(b);
    if (home == Home::kNvme) {
      sh = add_buffer(Kind::kNvmeStaging, "param shard " + what, Tier::kPinnedHost, sbytes);
      fetch = plan.add(
          "read param shard " + what, Lane::kNvme,
          [this, sh, b, sbytes, from_staging](const TaskContext& c) -> Status {
            if (flushing_ || (from_staging && update_step_ != 0)) return ok_status();
            moved(kNvmeRead, sbytes);
            return options_.swap_store->read(shard_key(b), c.buffer(sh), sbytes).wait();
          },
          deps);
      plan.acquire(fetch, sh);
      plan.writes(fetch, sh);
    } else if (home == Home::kDevice) {
      sh = gh;
      send_off = static_cast<size_t>(rank) * sbytes;
      const BufferId d = dshard_[size_t(b)];
      fetch = plan.add(
          "param shard down " + what, Lane::kD2H,
          [this, d, gh, send_off, sbytes](const TaskContext& c) -> Status {
            if (flushing_) return ok_status();
            moved(kD2H, sbytes);
            return c.stream->copy(static_cast<std::byte*>(c.buffer(gh)) + send_off, c.buffer(d),
                                  sbytes, gpu::CopyKind::kDeviceToHost);
          },
          deps);
      plan.acquire(fetch, gh);
      plan.reads(fetch, d);
      plan.writes(fetch, gh);
    }
    if (fetch >= 0) deps = {fetch};
    const BufferId staged = from_staging ? pbuf_[size_t(b)] : -1;
    if (from_staging) deps.push_back(shard_acquirer[p]);
    const TaskId gather = plan.add(
        "gather " + what, Lane::kComm,
        [this, sh, staged, send_off, gh, c16, dt, count](const TaskContext& c) -> Status {
          if (flushing_) return ok_status();
          comm::CollectiveCall call;
          call.kind = comm::CollectiveKind::kAllGather;
          const BufferId src = staged >= 0 && update_step_ != 0 ? staged : sh;
          call.send = static_cast<const std::byte*>(c.buffer(src)) + send_off;
          call.recv = c.buffer(gh);
          call.count = c16;
          call.dtype = dt;
          count(call, &ZeroTraffic::param_all_gather);
          return comm_.start(call).wait();
        },
        deps);
    const TaskId first = fetch >= 0 ? fetch : gather;
    if (!deferred.empty() && deferred.back().second == -1) deferred.back().second = first;
    if (home != Home::kDevice) plan.acquire(gather, gh);
    plan.reads(gather, sh);
    if (home == Home::kNvme) plan.release(gather, sh);
    if (from_staging) {
      plan.reads(gather, staged);
      plan.depend(shard_home[p], gather);  // the write home releases pbuf after this gather
    }
    plan.writes(gather, gh);
    const size_t bytes = static_cast<size_t>(numel(b)) * es;
    gt.upload = plan.add("upload " + what, Lane::kH2D,
                         [this, gh, gd, bytes](const TaskContext& c) -> Status {
                           if (flushing_) return ok_status();
                           moved(kH2D, bytes);
                           return c.stream->copy(c.buffer(gd), c.buffer(gh), bytes,
                                                 gpu::CopyKind::kHostToDevice);
                         },
                         {gather});
    plan.reads(gt.upload, gh);
    plan.release(gt.upload, gh);
    plan.acquire(gt.upload, gd);
    plan.writes(gt.upload, gd);
  };

  // Offloaded activation checkpoints (segments [0, S-1)). Segment s's kept input is written into
  // a device buffer by the layer before it (the embedding for s = 0), goes down after the next
  // layer's forward has read it (and on to NVMe), and comes back into another device buffer one
  // segment ahead: after the first op of segment s+1's backward (its recompute, or the head
  // backward for the last segment), for the recompute and the backward of its first layer.
  const int64_t nseg = offloaded_segments();
  const Home act_home = options_.offload_activations;
  const size_t cb = m.checkpoint_bytes();
  auto op_index = [&ops](const std::string& op_name) {
    size_t i = 0;
    while (i < ops.size() && ops[i].name != op_name) ++i;
    STRATA_CHECK(i < ops.size(), "ZeRO plan: no op " + op_name);
    return i;
  };
  struct CkUse {
    int64_t seg;
    BufferId buf;
    bool write, release;  // the writer acquires
  };
  std::vector<std::vector<CkUse>> ck_uses(ops.size());
  std::vector<std::vector<int64_t>> ck_down_after(ops.size()), ck_up_after(ops.size());
  std::vector<BufferId> ckf, ckb, ckh, ckr;
  std::vector<size_t> ck_writer;
  std::vector<TaskId> ck_up(size_t(nseg), -1), ck_stored(size_t(nseg), -1);
  for (int64_t s = 0; s < nseg; ++s) {
    const std::string n = "checkpoint " + std::to_string(s);
    ckf.push_back(add_buffer(Kind::kCheckpoint, n + " (forward)", Tier::kDevice, cb));
    ckb.push_back(add_buffer(Kind::kCheckpoint, n + " (backward)", Tier::kDevice, cb));
    ckh.push_back(add_buffer(Kind::kCheckpoint, n + (act_home == Home::kNvme ? " (to NVMe)" : ""),
                             Tier::kPinnedHost, cb));
    ckr.push_back(act_home == Home::kNvme
                      ? add_buffer(Kind::kCheckpoint, n + " (from NVMe)", Tier::kPinnedHost, cb)
                      : -1);
    const int64_t first = m.segment_begin(s);
    const size_t w =
        s == 0 ? op_index("embedding forward") : op_index("forward " + std::to_string(first - 1));
    const size_t trigger = s + 2 == m.num_segments()
                               ? op_index("head backward")
                               : op_index("recompute " + std::to_string(m.segment_begin(s + 1)));
    ck_writer.push_back(w);
    const auto us = size_t(s);
    ck_uses[w].push_back({s, ckf[us], true, false});
    ck_uses[op_index("forward " + std::to_string(first))].push_back({s, ckf[us], false, false});
    ck_uses[op_index("recompute " + std::to_string(first))].push_back({s, ckb[us], false, false});
    ck_uses[op_index("backward " + std::to_string(first))].push_back({s, ckb[us], false, true});
    ck_down_after[op_index("forward " + std::to_string(first))].push_back(s);
    ck_up_after[trigger].push_back(s);
  }
  // After op i: the checkpoints it was the last forward reader of go down (and to NVMe); those
  // wanted one segment ahead of it come back.
  auto emit_checkpoint_moves = [&](size_t i, TaskId t) {
    for (int64_t s : ck_down_after[i]) {
      const auto us = size_t(s);
      const BufferId f = ckf[us], h = ckh[us];
      const TaskId down = plan.add("checkpoint " + std::to_string(s) + " down", Lane::kD2H,
                                   [this, f, h, cb](const TaskContext& c) -> Status {
                                     if (flushing_) return ok_status();
                                     moved(kD2H, cb);
                                     return c.stream->copy(c.buffer(h), c.buffer(f), cb,
                                                           gpu::CopyKind::kDeviceToHost);
                                   },
                                   {op_task[ck_writer[us]], t});
      plan.acquire(down, h);
      plan.reads(down, f);
      plan.release(down, f);
      plan.writes(down, h);
      ck_stored[us] = down;
      if (act_home != Home::kNvme) continue;
      ck_stored[us] =
          plan.add("write checkpoint " + std::to_string(s), Lane::kNvme,
                   [this, h, s, cb](const TaskContext& c) -> Status {
                     if (flushing_) return ok_status();
                     moved(kNvmeWrite, cb);
                     return options_.swap_store->write(checkpoint_key(s), c.buffer(h), cb).wait();
                   },
                   {down});
      plan.reads(ck_stored[us], h);
      plan.release(ck_stored[us], h);
    }
    for (int64_t s : ck_up_after[i]) {
      const auto us = size_t(s);
      BufferId src = ckh[us];
      TaskId prev = ck_stored[us];
      if (act_home == Home::kNvme) {
        src = ckr[us];
        prev = plan.add(
            "read checkpoint " + std::to_string(s), Lane::kNvme,
            [this, src, s, cb](const TaskContext& c) -> Status {
              if (flushing_) return ok_status();
              moved(kNvmeRead, cb);
              return options_.swap_store->read(checkpoint_key(s), c.buffer(src), cb).wait();
            },
            {prev, t});
        plan.acquire(prev, src);
        plan.writes(prev, src);
      }
      const BufferId d = ckb[us];
      ck_up[us] = plan.add("checkpoint " + std::to_string(s) + " up", Lane::kH2D,
                           [this, src, d, cb](const TaskContext& c) -> Status {
                             if (flushing_) return ok_status();
                             moved(kH2D, cb);
                             return c.stream->copy(c.buffer(d), c.buffer(src), cb,
                                                   gpu::CopyKind::kHostToDevice);
                           },
                           {prev, t});
      plan.reads(ck_up[us], src);
      plan.release(ck_up[us], src);
      plan.acquire(ck_up[us], d);
      plan.writes(ck_up[us], d);
    }
  };

  // Emit the compute ops, the gathers ahead of them, and after each gradient: its transfer to
  // pinned memory, its reduction (comm) and its check (cpu).
  std::vector<TaskId> checks(nb, -1);
  size_t need = 0;  // gathers [0, need) are used by the ops so far
  for (size_t i = 0; i < ops.size(); ++i) {
    Op& op = ops[i];
    for (const auto& [b, ph] : op.uses) {
      if (gathered(b)) need = std::max(need, find_gather(b, ph) + 1);
    }
    if (need > 0) {
      const size_t upto = std::min(gathers.size(), need + depth);
      while (emitted < upto) emit_gather(emitted++);
    }
    if (op.zero_grad >= 0) {
      const BufferId dg = dgrad[size_t(op.zero_grad)];
      const size_t bytes = static_cast<size_t>(numel(op.zero_grad)) * es;
      const TaskId z = plan.add("zero grad " + name(op.zero_grad), Lane::kCompute,
                                [this, dg, bytes](const TaskContext& c) -> Status {
                                  if (flushing_) return ok_status();
                                  return c.stream->memset(c.buffer(dg), 0, bytes);
                                });
      plan.acquire(z, dg);
      plan.writes(z, dg);
    }
    auto fn = op.fn;
    std::vector<std::pair<int64_t, BufferId>> cks;  // the offloaded checkpoints it touches
    for (const CkUse& u : ck_uses[i]) cks.emplace_back(u.seg, u.buf);
    const TaskId t =
        plan.add(op.name, Lane::kCompute, [this, &m, fn, cks](const TaskContext& c) -> Status {
          if (flushing_) return ok_status();
          for (const auto& [seg, buf] : cks)
            STRATA_RETURN_IF_ERROR(m.set_checkpoint(seg, c.buffer(buf)));
          return fn(*c.stream, c);
        });
    op_task[i] = t;
    for (const CkUse& u : ck_uses[i]) {
      if (u.write) {
        plan.acquire(t, u.buf);
        plan.writes(t, u.buf);
      } else {
        plan.reads(t, u.buf);
        if (ck_up[size_t(u.seg)] >= 0 && u.buf == ckb[size_t(u.seg)]) {
          plan.depend(t, ck_up[size_t(u.seg)]);
        }
      }
      if (u.release) plan.release(t, u.buf);
    }
    emit_checkpoint_moves(i, t);
    for (const auto& [after, gather] : deferred) {
      if (after == i) plan.depend(gather, t);
    }
    if (!delayed && op.first_use_of >= 0 && ready[size_t(op.first_use_of)] >= 0 &&
        !gathered(op.first_use_of)) {
      plan.depend(t, ready[size_t(op.first_use_of)]);
    }
    // Delayed: a block's new parameters go up after this step's last use of the old ones.
    for (size_t b = 0; delayed && b < nb; ++b) {
      if (last_read[b] == i && ready[b] >= 0) plan.depend(ready[b], t);
    }
    for (const auto& [b, ph] : op.uses) {
      if (!gathered(b)) {  // a device shard used in place (one rank)
        plan.reads(t, dshard_[size_t(b)]);
        if (ready[size_t(b)] >= 0) plan.depend(t, ready[size_t(b)]);
        continue;
      }
      const Gather& gt = gathers[find_gather(b, ph)];
      plan.depend(t, gt.upload);
      plan.reads(t, gathered_dev[ph][size_t(b)]);
      if (gt.last == i) plan.release(t, gathered_dev[ph][size_t(b)]);
    }
    const int64_t gb = op.grad_done;
    if (stage >= 2) {
      if (op.zero_grad >= 0) plan.writes(t, dgrad[size_t(op.zero_grad)]);
      if (gb >= 0 && gb != op.zero_grad) plan.writes(t, dgrad[size_t(gb)]);
      // The shared block's gradient is also written between head and embedding backward.
      if (gb == L) plan.reads(t, dgrad[size_t(L)]);
    }
    if (gb < 0) continue;
    // The gradient of block gb is complete: down, reduce, check.
    const BufferId gf = gfull[size_t(gb)];
    const size_t bytes = static_cast<size_t>(numel(gb)) * es;
    const BufferId dg = dgrad[size_t(gb)];
    const TaskId down =
        plan.add("grads down " + name(gb), Lane::kD2H,
                 [this, &m, gb, gf, dg, bytes](const TaskContext& c) -> Status {
                   if (flushing_) return ok_status();
                   moved(kD2H, bytes);
                   const void* src = dg >= 0 ? c.buffer(dg) : m.grad_block(gb);
                   return c.stream->copy(c.buffer(gf), src, bytes, gpu::CopyKind::kDeviceToHost);
                 },
                 {t});
    // Delayed, the previous step's update may still be reading this block's gradient buffers.
    if (delayed && grad_reader[size_t(gb)] >= 0) plan.depend(down, grad_reader[size_t(gb)]);
    if (stage >= 2) {
      plan.acquire(down, gf);
      plan.reads(down, dg);
      plan.release(down, dg);
    }
    plan.writes(down, gf);
    const BufferId gs = gshard[size_t(gb)];
    const size_t c16 = static_cast<size_t>(shard(gb));
    const size_t real = static_cast<size_t>(numel(gb));
    const TaskId reduce = plan.add(
        "reduce " + name(gb), Lane::kComm,
        [this, gf, gs, gb, c16, real, dt, es, count, stage, rank](const TaskContext& c) -> Status {
          if (flushing_) return ok_status();
          auto* full = static_cast<std::byte*>(c.buffer(gf));
          if (gb == 0 && step_ == options_.inject_inf_step) write_inf(full, dt);
          const size_t total = c16 * static_cast<size_t>(ranks_);
          std::memset(full + real * es, 0, (total - real) * es);  // the padding takes part
          comm::CollectiveCall call;
          call.kind = comm::CollectiveKind::kReduceScatter;
          call.send = full;
          call.recv = gs >= 0 ? c.buffer(gs) : full + static_cast<size_t>(rank) * c16 * es;
          call.count = c16;
          call.dtype = dt;
          count(call, &ZeroTraffic::grad_reduce_scatter);
          STRATA_RETURN_IF_ERROR(comm_.start(call).wait());
          if (stage != 0) return ok_status();
          comm::CollectiveCall gather = call;  // stage 0: the other half of the all-reduce
          gather.kind = comm::CollectiveKind::kAllGather;
          gather.send = call.recv;
          gather.recv = full;
          count(gather, &ZeroTraffic::grad_all_gather);
          return comm_.start(gather).wait();
        },
        {down});
    plan.reads(reduce, gf);
    plan.writes(reduce, gf);
    if (gs >= 0) {
      plan.writes(reduce, gs);
      plan.release(reduce, gf);
    }
    // The check: the sums of squares of the reduced shards this rank holds.
    const size_t nbk = nb;
    const BufferId src = gs >= 0 ? gs : gf;
    checks[size_t(gb)] =
        plan.add("check " + name(gb), Lane::kCpu,
                 [this, src, gb, c16, dt, es, stage, rank, nbk](const TaskContext& c) -> Status {
                   if (flushing_) return ok_status();
                   const auto* base = static_cast<const std::byte*>(c.buffer(src));
                   for (int r = 0; r < ranks_; ++r) {
                     if (stage != 0 && r != rank) continue;
                     const std::byte* at =
                         stage == 0 || stage == 1 ? base + static_cast<size_t>(r) * c16 * es : base;
                     const cpu::GradStats s = cpu::grad_check(at, dt, static_cast<int64_t>(c16));
                     double* out = &stats_[(static_cast<size_t>(r) * nbk + size_t(gb)) * 2];
                     out[0] = s.sum_squares;
                     out[1] = s.has_nonfinite ? 1.0 : 0.0;
                     // Not rotated, the block's Adam follows at once: a non-finite gradient (an
                     // error without fp16) must stop the step before it reaches the state.
                     if (!rotate_ && s.has_nonfinite) return nonfinite_gradient_error(step_);
                   }
                   return ok_status();
                 },
                 {reduce});
    plan.reads(checks[size_t(gb)], src);
    // Not rotated: the block's update right after its own check (the next step's forward comes
    // after this replay anyway).
    if (!rotate_) add_update(part_of[size_t(gb)], {checks[size_t(gb)]});
  }

  // The statistics of every shard on every rank (stages 1-3), then the norm in a fixed order.
  std::vector<TaskId> norm_deps = checks;
  if (stage >= 1 && ranks > 1) {
    const TaskId exchange = plan.add(
        "exchange statistics", Lane::kComm,
        [this, nbk = nb, count](const TaskContext&) -> Status {
          if (flushing_) return ok_status();
          // Raw bits: doubles moved as 16-bit words (a gather moves, it does not convert).
          const size_t words = nbk * 2 * sizeof(double) / 2;
          comm::CollectiveCall call;
          call.kind = comm::CollectiveKind::kAllGather;
          call.send = stats_.data() + static_cast<size_t>(rank_) * nbk * 2;
          call.recv = stats_.data();
          call.count = words;
          call.dtype = DType::kBF16;
          count(call, &ZeroTraffic::stats);
          return comm_.start(call).wait();
        },
        checks);
    norm_deps = {exchange};
  }
  plan.add(
      "norm", Lane::kCpu,
      [this, nbk = nb](const TaskContext&) {
        if (flushing_) return ok_status();
        double sum = 0.0;
        bool finite = true;
        for (size_t b = 0; b < nbk; ++b) {
          for (int r = 0; r < ranks_; ++r) {
            const double* s = &stats_[(static_cast<size_t>(r) * nbk + b) * 2];
            sum += s[0];
            finite = finite && s[1] == 0.0;
          }
        }
        sum_ = sum;
        finite_ = finite;
        return ok_status();
      },
      norm_deps);

  // Budgets: the whole-step buffers, plus the working set. Pinned: the NVMe staging slots,
  // the gradients awaiting reduction (the bucket) and depth + 2 gathered blocks. Device (stages
  // 2-3): the gradients of three blocks (the shared one is held through the backward) and, at
  // stage 3, the gathered copies of depth + K + 2 blocks (a checkpointed segment of K layers
  // stays gathered from its recompute to its backward).
  uint64_t largest_dev = 0;
  for (size_t b = 0; b < nb; ++b) {
    largest_dev = std::max<uint64_t>(
        largest_dev, (static_cast<uint64_t>(numel(int64_t(b))) * es + 255) / 256 * 256);
  }
  sched::Budgets budgets;
  // Shards homed off pinned memory: staging_slots new shards on their way home, and the NVMe
  // reads of depth + 2 gathers.
  // Offloaded checkpoints: all of them held in pinned memory (cpu), or four in staging (nvme);
  // three on the device.
  const uint64_t ck_pinned = nseg == 0                   ? 0
                             : act_home == Home::kPinned ? uint64_t(nseg) * round_page(cb)
                                                         : 4 * round_page(cb);
  budgets.bytes[static_cast<int>(Tier::kPinnedHost)] =
      ck_pinned + pinned + in_flight +
      static_cast<uint64_t>(options_.staging_slots) * (slot_bytes + largest_moving) +
      (gathers.empty() ? 0 : (depth + 2) * (round_page(largest) + largest_nvme));
  // The device optimizer's gradient and new-parameter buffers: two of each in flight.
  if (stage >= 2 || largest_opt > 0) {
    const uint64_t k = static_cast<uint64_t>(m.checkpoint_interval());
    budgets.bytes[static_cast<int>(Tier::kDevice)] =
        (nseg == 0 ? 0 : 3 * round_device(cb)) + device_homes + (stage >= 2 ? 3 * largest_dev : 0) +
        (gathers.empty() ? 0 : (depth + k + 2) * largest_dev) + 4 * largest_opt;
  }
  // At most staging_slots partitions' state in flight: each read waits for the write-back of the
  // partition staging_slots before it in visit order. (The greedy placement would otherwise let
  // reads take the room of other pinned buffers the updates need, and find no order that fits.)
  // Likewise at most staging_slots new shards on their way home.
  const auto slots = static_cast<size_t>(options_.staging_slots);
  auto bound = [&](const std::vector<TaskId>& acquirer, const std::vector<TaskId>& releaser) {
    std::vector<size_t> order;
    for (size_t p : visit) {
      if (acquirer[p] >= 0 && releaser[p] >= 0) order.push_back(p);
    }
    for (size_t i = slots; i < order.size(); ++i) {
      plan.depend(acquirer[order[i]], releaser[order[i - slots]]);
    }
  };
  bound(read, state_written);
  bound(shard_acquirer, shard_home);
  STRATA_RETURN_IF_ERROR(plan.finalize(budgets).with_context("planning the ZeRO step"));
  return plan;
}

}  // namespace strata::engine

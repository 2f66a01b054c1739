// EngineConfig: everything a front end decides about how the engine trains, typed, in sections
// that the components take as they are: `zero` (the stage and where the model's state lives;
// ZeroStep), `optimizer` (where the fp32 state lives and the update; ZeroStep and the optimizer),
// `schedule` (the step and its micro-batches), `storage` (the memory budgets and the NVMe store;
// the session's swap store), beside the precision and the fp16 loss scaling. One table declares
// every field (engine_fields.h): its name, the member's path (`zero.stage`), its range, its JSON.
// One validate() refuses a bad value or combination in one line naming the field.
//
// Fields in messages. The engine names a setting by its field (Field, field_name()), written as
// ref(Field): the field's name between backticks, e.g. "`zero.stage` 4 is not accepted (0..3)".
// A front end renders those references in its own vocabulary (render_fields(): train_gpt turns
// `zero.stage` into --zero-stage, and can name the DeepSpeed key it came from); unrendered, the
// message still reads. No front end's flag or key names appear in src/.
//
// Ownership: a value type. Thread safety: none needed (read-only once built).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "cpu/cpu_adam.h"
#include "engine/engine_fields.h"
#include "engine/loss_scaler.h"
#include "model/model.h"

namespace strata::engine {

// Where a piece of state lives between its uses: the optimizer's fp32 state (none|cpu|nvme: on
// the device, pinned host memory, NVMe), a stage-3 parameter shard, an activation checkpoint.
enum class Home { kDevice, kPinned, kNvme };
std::string_view home_name(Home home);  // "none", "cpu", "nvme"

// The step that runs: the plan (overlapped, every stage) or the serial reference (one rank,
// stage 0, the optimizer on the host).
enum class Schedule { kPlanned, kSerial };
std::string_view schedule_name(Schedule schedule);  // "planned", "serial"
// The order of a step's micro-batches (EngineConfig::microbatch_order): micro-batch by
// micro-batch, segment-major (every micro-batch through a checkpoint segment before the next),
// or the planner's choice (planner::choose resolves it before a session is made).
enum class MicrobatchOrder { kMicro, kLayer, kAuto };
std::string_view microbatch_order_name(MicrobatchOrder order);  // "micro", "layer", "auto"
// Where the ZeRO step's collectives run (ZeroSettings::collectives): on pinned host memory over
// the host communicator (every gathered block goes up whole, every gradient comes down whole), or
// on the device over a communicator of device buffers (NCCL; on the CpuDevice, whose device
// memory is host memory, the host communicator), so that only the rank's shard crosses between
// host and device. kAuto: the planner's choice (planner::choose prices both).
enum class Collectives { kHost, kDevice, kAuto };
std::string_view collectives_name(Collectives where);  // "host", "device", "auto"

// The settings, by name, as messages refer to them (engine_fields.h: one line per field).
enum class Field {
#define STRATA_FIELD_ENUM(e, member, accepted) e,
  STRATA_ENGINE_FIELDS(STRATA_FIELD_ENUM)
#undef STRATA_FIELD_ENUM
};
inline constexpr int kNumFields = static_cast<int>(Field::kCollectives) + 1;
std::string_view field_name(Field field);  // the member's path: "zero_stage", "adam.lr", ...
// "`zero_stage`": how a message names a field (render_fields() replaces it).
std::string ref(Field field);
// `message` with every field reference replaced by name(field).
std::string render_fields(std::string_view message, const std::function<std::string(Field)>& name);

// The ZeRO partitioning and where the model's own state lives between uses (ZeroStep takes it
// as it is).
struct ZeroSettings {
  int stage = 0;                                 // 0..3
  std::optional<Home> offload_param;             // stage 3's shards (unset: kPinned there)
  double param_gpu_fraction = 0.0;               // stage 3: the share of shards kept on the device
  Home offload_activations = Home::kDevice;      // the activation checkpoints
  int prefetch_depth = 2;                        // stage 3: gathers ahead of the one in use
  uint64_t bucket_bytes = 0;                     // stage >= 2: host gradients awaiting reduction
  int64_t persistence_threshold = 0;             // stage 3: blocks under this stay whole
  Collectives collectives = Collectives::kHost;  // where the collectives run (above)

  // Where stage 3's shards live (kPinned unless set).
  Home param_home() const { return offload_param.value_or(Home::kPinned); }
};

// The optimizer: where its fp32 state lives and updates, and the update itself (ZeroStep and
// the session's OffloadedOptimizer take it as it is).
struct OptimizerSettings {
  Home offload = Home::kPinned;        // the fp32 master, m and v (kDevice: updated there)
  double nvme_fraction = 0.0;          // offload kNvme: the NVMe share
  double gpu_fraction = 0.0;           // the share updated on the device anyway
  int64_t delayed_update_warmup = -1;  // the one-step delayed update from here; -1: off
  float grad_clip = 1.0f;              // the global norm's bound; 0: off
  cpu::AdamHyper adam;
  model::DecayRule decay_on = model::DecayRule::kAll;  // which parameters take weight decay

  bool delayed_update() const { return delayed_update_warmup >= 0; }
};

// The step that runs and its micro-batches.
struct ScheduleSettings {
  Schedule kind = Schedule::kPlanned;
  int64_t grad_accum = 1;  // micro-batches per step
  // Stages 2-3 with grad_accum > 1: the dtype in which the host adds up the micro-batches'
  // reduced gradient shards (kF32, or the precision's own 16-bit type, as DeepSpeed's
  // data_types.grad_accum_dtype). Stages 0-1 add them on the device in the model's precision.
  DType grad_accum_dtype = DType::kF32;
  // The order of a step's grad_accum micro-batches (zero_step.h): micro-batch by micro-batch, or
  // segment-major (kLayer: every micro-batch through a checkpoint segment before the next, so a
  // segment's parameters are used once per pass per step; the planned schedule, not with the
  // delayed update). kAuto: the planner chooses (a session refuses it unresolved).
  MicrobatchOrder microbatch_order = MicrobatchOrder::kMicro;
  // Segment-major at stages 2-3: a block's gradients of the micro-batches add up on the device
  // and their sum is reduced once per step (the gradient traffic, reductions and host adds once
  // per step, not grad_accum times; the bits of stages 0-1, which add them on the device too),
  // instead of each micro-batch's being reduced and the reduced shards added on the host (the
  // bits of the micro-batch-major order at the same stage).
  bool device_grad_sum = false;

  // The micro-batches one replay of the plan runs: grad_accum in the segment-major order, else 1.
  int micros_per_replay() const {
    return microbatch_order == MicrobatchOrder::kLayer ? static_cast<int>(grad_accum) : 1;
  }
};

// The memory budgets and the NVMe swap store (the session opens the store with it).
struct StorageSettings {
  uint64_t gpu_memory_limit = 0;        // bytes; 0: the device's pool
  uint64_t host_memory_limit = 0;       // pinned bytes per rank; 0: no limit
  std::vector<std::string> nvme_paths;  // the swap store's directories
  uint64_t nvme_block_size = 1 << 20;   // bytes per request, a multiple of 4096
  int nvme_queue_depth = 32;            // io_uring entries (1..4096)
  int nvme_buffer_count = 3;            // pinned staging buffers per NVMe stream (1..64)
};

struct EngineConfig {
  DType precision = DType::kBF16;  // parameters, gradients, activations
  LossScalerOptions loss_scaling;  // fp16 only (loss_scale 0: dynamic)
  ZeroSettings zero;
  OptimizerSettings optimizer;
  ScheduleSettings schedule;
  StorageSettings storage;
  // The planner chooses the offload settings (zero.offload_param, zero.param_gpu_fraction,
  // optimizer.gpu_fraction, optimizer.offload, optimizer.nvme_fraction,
  // zero.offload_activations, zero.prefetch_depth, with several micro-batches
  // schedule.microbatch_order) and the model's checkpoint interval: planner::choose resolves it
  // before a session is made (a session refuses it). Stage 3, the planned schedule.
  bool offload_auto = false;

  bool delayed_update() const { return optimizer.delayed_update(); }
  bool layer_major() const { return schedule.microbatch_order == MicrobatchOrder::kLayer; }
  Home param_home() const { return zero.param_home(); }
  // Whether any state lives on NVMe (the swap store is needed).
  bool uses_nvme() const {
    return optimizer.offload == Home::kNvme || param_home() == Home::kNvme ||
           zero.offload_activations == Home::kNvme;
  }
  // Whether the ZeRO step runs (every case but the single-rank serial reference).
  bool planned() const { return schedule.kind == Schedule::kPlanned; }

  // kConfig naming the first field (ref()) whose value, or combination with another, is not
  // accepted, with the value and what is. store_given: the NVMe homes go into a swap store the
  // caller hands the session (SessionInputs::store), so they need no nvme_paths.
  Status validate(bool store_given = false) const;
};

// Calls visit(field, member) for every field of `config` (const or not), in Field's order.
template <typename Config, typename Visit>
void visit_fields(Config& config, Visit&& visit) {
#define STRATA_FIELD_VISIT(e, member, accepted) visit(Field::e, config.member);
  STRATA_ENGINE_FIELDS(STRATA_FIELD_VISIT)
#undef STRATA_FIELD_VISIT
}
// The values `field` takes by itself (engine_fields.h).
Accepted accepted(Field field);

}  // namespace strata::engine

#include "engine/engine_config.h"

#include <array>
#include <sstream>
#include <type_traits>

namespace strata::engine {

namespace {
constexpr std::array<std::string_view, kNumFields> kFieldNames = {
#define STRATA_FIELD_NAME(e, member, accepted) #member,
    STRATA_ENGINE_FIELDS(STRATA_FIELD_NAME)
#undef STRATA_FIELD_NAME
};
constexpr std::array<Accepted, kNumFields> kAccepted = {
#define STRATA_FIELD_ACCEPTED(e, member, accepted) accepted,
    STRATA_ENGINE_FIELDS(STRATA_FIELD_ACCEPTED)
#undef STRATA_FIELD_ACCEPTED
};

Status refuse(Field field, const auto& value, std::string_view accepted) {
  return make_error(ErrorCode::kConfig, ref(field), " ", value, " is not accepted (", accepted,
                    ")");
}

// An NVMe home needs a directory to put it in (or a store given to the session).
Status check_nvme_home(Field field, Home home, const EngineConfig& c, bool store_given,
                       std::string_view holds) {
  if (home != Home::kNvme || store_given || !c.storage.nvme_paths.empty()) return ok_status();
  return make_error(ErrorCode::kConfig, ref(field), " nvme needs ", ref(Field::kNvmePath),
                    " DIR[,DIR...] (a directory on the disk that holds ", holds, ")");
}

// A setting only the planned step has.
Status check_planned(const EngineConfig& c, bool used, const std::string& what,
                     std::string_view why) {
  if (!used || c.planned()) return ok_status();
  return make_error(ErrorCode::kConfig, what, " needs ", ref(Field::kSchedule), " planned (", why,
                    ")");
}

// "`field` value", as make_error prints values.
std::string setting(Field field, const auto& value) {
  std::ostringstream os;
  os << ref(field) << ' ' << value;
  return os.str();
}
}  // namespace

std::string_view home_name(Home home) {
  switch (home) {
    case Home::kDevice: return "none";
    case Home::kPinned: return "cpu";
    case Home::kNvme: return "nvme";
  }
  return "?";
}

std::string_view microbatch_order_name(MicrobatchOrder order) {
  switch (order) {
    case MicrobatchOrder::kMicro: return "micro";
    case MicrobatchOrder::kLayer: return "layer";
    case MicrobatchOrder::kAuto: return "auto";
  }
  return "?";
}

std::string_view collectives_name(Collectives where) {
  return where == Collectives::kDevice ? "device" : where == Collectives::kAuto ? "auto" : "host";
}

std::string_view schedule_name(Schedule schedule) {
  return schedule == Schedule::kPlanned ? "planned" : "serial";
}

std::string_view field_name(Field field) { return kFieldNames[static_cast<size_t>(field)]; }

Accepted accepted(Field field) { return kAccepted[static_cast<size_t>(field)]; }

std::string ref(Field field) {
  std::string s = "`";
  s += field_name(field);
  s += '`';
  return s;
}

std::string render_fields(std::string_view message, const std::function<std::string(Field)>& name) {
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    const size_t open = message.find('`', i);
    const size_t close = open == std::string_view::npos ? open : message.find('`', open + 1);
    if (close == std::string_view::npos) break;
    const std::string_view inner = message.substr(open + 1, close - open - 1);
    out.append(message.substr(i, open - i));
    bool known = false;
    for (int f = 0; f < kNumFields && !known; ++f) {
      if (kFieldNames[size_t(f)] != inner) continue;
      out += name(static_cast<Field>(f));
      known = true;
    }
    if (!known) {  // a backtick of something else: kept, and the scan goes on after it
      out += '`';
      i = open + 1;
      continue;
    }
    i = close + 1;
  }
  out.append(message.substr(i));
  return out;
}

Status EngineConfig::validate(bool store_given) const {
  // Each number in the range its line of the table gives.
  Status range = ok_status();
  visit_fields(*this, [&range](Field field, const auto& value) {
    using T = std::decay_t<decltype(value)>;
    const Accepted a = accepted(field);
    if constexpr (std::is_arithmetic_v<T>) {
      if (range.ok() && a.words != nullptr && !(double(value) >= a.lo && double(value) <= a.hi)) {
        range = refuse(field, value, a.words);
      }
    }
  });
  STRATA_RETURN_IF_ERROR(range);
  if (schedule.grad_accum_dtype != DType::kF32 && schedule.grad_accum_dtype != precision) {
    return make_error(ErrorCode::kConfig, ref(Field::kGradAccumDtype), " ",
                      dtype_name(schedule.grad_accum_dtype), " is not accepted with ",
                      ref(Field::kPrecision), " ", dtype_name(precision),
                      " (f32, or the precision's own)");
  }
  if (loss_scaling.loss_scale != 0.0 && precision != DType::kF16) {
    return make_error(ErrorCode::kConfig, ref(Field::kLossScale), " ", loss_scaling.loss_scale,
                      " needs ", ref(Field::kPrecision),
                      " fp16 (bf16 and fp32 are not loss-scaled)");
  }
  STRATA_RETURN_IF_ERROR(check_nvme_home(Field::kOffloadOptimizer, optimizer.offload, *this,
                                         store_given, "the optimizer state"));
  if (zero.offload_param) {
    STRATA_RETURN_IF_ERROR(check_nvme_home(Field::kOffloadParam, *zero.offload_param, *this,
                                           store_given, "the parameter shards"));
  }
  STRATA_RETURN_IF_ERROR(check_nvme_home(Field::kOffloadActivations, zero.offload_activations,
                                         *this, store_given, "the activation checkpoints"));
  STRATA_RETURN_IF_ERROR(check_planned(*this, optimizer.offload == Home::kDevice,
                                       setting(Field::kOffloadOptimizer, "none"),
                                       "the serial step updates on the host"));
  STRATA_RETURN_IF_ERROR(check_planned(*this, delayed_update(), ref(Field::kDelayedUpdate),
                                       "the serial step is the reference without it"));
  if (schedule.grad_accum > 1 && delayed_update()) {
    return make_error(ErrorCode::kConfig, ref(Field::kGradAccum), " ", schedule.grad_accum,
                      " does not go with ", ref(Field::kDelayedUpdate), " (use one or the other)");
  }
  if (schedule.device_grad_sum && (schedule.microbatch_order == MicrobatchOrder::kMicro ||
                                   zero.stage < 2 || schedule.grad_accum < 2)) {
    return make_error(ErrorCode::kConfig, ref(Field::kDeviceGradSum), " needs ",
                      ref(Field::kMicrobatchOrder), " layer, ", ref(Field::kGradAccum),
                      " 2 or more and ", ref(Field::kZeroStage),
                      " 2 or 3 (stages 0-1 add the gradients on the device anyway)");
  }
  if (layer_major()) {
    const std::string order = ref(Field::kMicrobatchOrder) + " layer";
    STRATA_RETURN_IF_ERROR(check_planned(*this, true, order, "the serial step runs one order"));
    if (delayed_update()) {
      return make_error(ErrorCode::kConfig, order, " does not go with ", ref(Field::kDelayedUpdate),
                        " (use one or the other)");
    }
  }
  if (optimizer.gpu_fraction > 0.0 && optimizer.offload == Home::kDevice) {
    return make_error(ErrorCode::kConfig, ref(Field::kGpuOptimizerFraction), " ",
                      optimizer.gpu_fraction, " needs ", ref(Field::kOffloadOptimizer),
                      " cpu or nvme (none keeps all of the state on the device)");
  }
  STRATA_RETURN_IF_ERROR(
      check_planned(*this, optimizer.gpu_fraction > 0.0,
                    setting(Field::kGpuOptimizerFraction, optimizer.gpu_fraction),
                    "the serial step updates on the host"));
  if (optimizer.gpu_fraction + optimizer.nvme_fraction > 1.0) {
    return make_error(ErrorCode::kConfig, ref(Field::kGpuOptimizerFraction), " ",
                      optimizer.gpu_fraction, " and ", ref(Field::kOptimizerNvmeFraction), " ",
                      optimizer.nvme_fraction,
                      " add up to more than 1 (a partition is on the device or on NVMe)");
  }
  STRATA_RETURN_IF_ERROR(check_planned(*this, zero.stage > 0,
                                       setting(Field::kZeroStage, zero.stage),
                                       "the serial step is the one-rank reference"));
  STRATA_RETURN_IF_ERROR(
      check_planned(*this, zero.collectives != Collectives::kHost,
                    setting(Field::kCollectives, collectives_name(zero.collectives)),
                    "the serial step has no collectives"));
  if ((zero.offload_param || zero.param_gpu_fraction > 0.0) && zero.stage != 3) {
    return make_error(ErrorCode::kConfig,
                      zero.offload_param
                          ? setting(Field::kOffloadParam, home_name(*zero.offload_param))
                          : ref(Field::kParamGpuFraction),
                      " needs ", ref(Field::kZeroStage),
                      " 3 (stages 0-2 keep every parameter whole on the device; DeepSpeed's "
                      "offload_param needs stage 3 too)");
  }
  if (zero.param_gpu_fraction > 0.0 && param_home() == Home::kDevice) {
    return make_error(ErrorCode::kConfig, ref(Field::kParamGpuFraction), " ",
                      zero.param_gpu_fraction, " needs ", ref(Field::kOffloadParam),
                      " cpu or nvme (none keeps every shard on the device)");
  }
  STRATA_RETURN_IF_ERROR(
      check_planned(*this, zero.offload_activations != Home::kDevice,
                    setting(Field::kOffloadActivations, home_name(zero.offload_activations)),
                    "the transfers are tasks of the plan"));
  if (delayed_update() && zero.stage == 3) {
    return make_error(ErrorCode::kConfig, ref(Field::kDelayedUpdate), " needs ",
                      ref(Field::kZeroStage),
                      " 0, 1 or 2 (at stage 3 the update writes the parameter shards the step's "
                      "gathers read)");
  }
  if (delayed_update() && (optimizer.offload == Home::kDevice || optimizer.gpu_fraction > 0.0)) {
    return make_error(ErrorCode::kConfig, ref(Field::kDelayedUpdate),
                      " overlaps the CPU Adam with the step: not with the optimizer on the device "
                      "(",
                      ref(Field::kOffloadOptimizer), " none, ", ref(Field::kGpuOptimizerFraction),
                      ")");
  }
  if (offload_auto && (zero.stage != 3 || !planned())) {
    return make_error(ErrorCode::kConfig, ref(Field::kOffloadAuto),
                      " chooses the stage-3 settings: it needs ", ref(Field::kZeroStage), " 3 and ",
                      ref(Field::kSchedule), " planned, not ", ref(Field::kZeroStage), " ",
                      zero.stage, " with ", ref(Field::kSchedule), " ",
                      schedule_name(schedule.kind));
  }
  if (optimizer.offload != Home::kNvme && optimizer.nvme_fraction > 0.0) {
    return make_error(ErrorCode::kConfig, ref(Field::kOptimizerNvmeFraction), " ",
                      optimizer.nvme_fraction, " needs ", ref(Field::kOffloadOptimizer), " nvme");
  }
  if (storage.nvme_block_size == 0 || storage.nvme_block_size % 4096 != 0) {
    return refuse(Field::kNvmeBlockSize, storage.nvme_block_size,
                  "a positive multiple of 4096 bytes");
  }
  return ok_status();
}

}  // namespace strata::engine

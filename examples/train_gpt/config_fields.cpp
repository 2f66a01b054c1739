#include "config_fields.h"

#include <array>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>

#include "nvme/swap_store.h"

namespace strata::train_gpt {

namespace {
using engine::Field;
constexpr std::array<FieldNames, engine::kNumFields> kTable = {{
    {Field::kZeroStage, "--zero-stage", "zero_optimization.stage"},
    {Field::kPrecision, "--precision", "bf16.enabled / fp16.enabled"},
    {Field::kLossScale, "--loss-scale", "fp16.loss_scale"},
    {Field::kOffloadOptimizer, "--offload-optimizer", "zero_optimization.offload_optimizer.device"},
    {Field::kOptimizerNvmeFraction, "--optimizer-nvme-fraction", ""},
    {Field::kGpuOptimizerFraction, "--gpu-optimizer-fraction",
     "zero_optimization.offload_optimizer.ratio"},
    {Field::kOffloadParam, "--offload-param", "zero_optimization.offload_param.device"},
    {Field::kParamGpuFraction, "--param-gpu-fraction", ""},
    {Field::kOffloadActivations, "--offload-activations",
     "activation_checkpointing.cpu_checkpointing"},
    {Field::kPrefetchDepth, "--prefetch-depth", "zero_optimization.stage3_prefetch_bucket_size"},
    {Field::kBucketBytes, "--bucket-mb", "zero_optimization.reduce_bucket_size"},
    {Field::kPersistenceThreshold, "--persistence-threshold",
     "zero_optimization.stage3_param_persistence_threshold"},
    {Field::kDelayedUpdate, "--delayed-update", ""},
    {Field::kSchedule, "--schedule", ""},
    {Field::kGradAccum, "--grad-accum", "gradient_accumulation_steps"},
    {Field::kGradClip, "--grad-clip", "gradient_clipping"},
    {Field::kGpuMemoryLimit, "--gpu-memory-limit", ""},
    {Field::kHostMemoryLimit, "--host-memory-limit", ""},
    {Field::kNvmePath, "--nvme-path", "zero_optimization.offload_optimizer.nvme_path"},
    {Field::kNvmeBlockSize, "--nvme-block-size", "aio.block_size"},
    {Field::kNvmeQueueDepth, "--nvme-queue-depth", "aio.queue_depth"},
    {Field::kNvmeBufferCount, "--nvme-buffer-count",
     "zero_optimization.offload_optimizer.buffer_count"},
    {Field::kLr, "--lr", "optimizer.params.lr"},
    {Field::kGradAccumDtype, "--grad-accum-dtype", "data_types.grad_accum_dtype"},
    {Field::kMicrobatchOrder, "--microbatch-order", ""},
    {Field::kDeviceGradSum, "--device-grad-sum", ""},
    {Field::kOffloadAuto, "--auto", ""},
    {Field::kBeta1, "--beta1", "optimizer.params.betas"},
    {Field::kBeta2, "--beta2", "optimizer.params.betas"},
    {Field::kEps, "--eps", "optimizer.params.eps"},
    {Field::kWeightDecay, "--weight-decay", "optimizer.params.weight_decay"},
    {Field::kAdamMode, "--adam-mode", "optimizer.type"},
    {Field::kBiasCorrection, "--no-bias-correction", "optimizer.params.bias_correction"},
    {Field::kDecayOn, "--weight-decay-on", ""},
    {Field::kInitialScalePower, "--initial-scale-power", "fp16.initial_scale_power"},
    {Field::kLossScaleWindow, "--loss-scale-window", "fp16.loss_scale_window"},
    {Field::kHysteresis, "--hysteresis", "fp16.hysteresis"},
    {Field::kMinLossScale, "--min-loss-scale", "fp16.min_loss_scale"},
    {Field::kConsecutiveHysteresis, "--consecutive-hysteresis", "fp16.consecutive_hysteresis"},
    {Field::kCollectives, "--comm", ""},
}};

constexpr bool in_field_order() {
  for (size_t i = 0; i < kTable.size(); ++i) {
    if (static_cast<size_t>(kTable[i].field) != i) return false;
  }
  return true;
}
static_assert(in_field_order(), "kTable lists every engine::Field once, in order");

engine::Home home(const std::string& value) {
  return value == "none"   ? engine::Home::kDevice
         : value == "nvme" ? engine::Home::kNvme
                           : engine::Home::kPinned;
}
}  // namespace

const FieldNames& field_names(Field field) { return kTable[static_cast<size_t>(field)]; }

namespace {
std::map<std::string, std::string>& config_keys() {
  static std::map<std::string, std::string> keys;
  return keys;
}
}  // namespace

void name_config_keys(const std::map<std::string, std::string>& keys) { config_keys() = keys; }

std::string with_placement_flags(std::string text) {
  static const std::pair<const char*, const char*> kPlacement[] = {
      {"`bind`", "--bind"}, {"`device_ids`", "--device-ids"}};
  for (const auto& [field, flag] : kPlacement) {
    for (size_t at = text.find(field); at != std::string::npos; at = text.find(field, at)) {
      text.replace(at, std::string_view(field).size(), flag);
    }
  }
  return text;
}

Status with_flag_names(const Status& st) {
  if (st.ok()) return st;
  return Status(st.code(), with_placement_flags(engine::render_fields(st.message(), [](Field f) {
                  const std::string flag(field_names(f).flag);
                  const auto k = config_keys().find(flag);
                  return k == config_keys().end() ? flag : k->second + " (" + flag + ")";
                })));
}

Result<engine::EngineConfig> engine_config(const Flags& f) {
  engine::EngineConfig c;
  if (!f.nvme_path.empty()) {
    auto dirs = nvme::parse_nvme_paths(f.nvme_path);
    if (!dirs.ok()) return dirs.status().with_context("--nvme-path");
    c.storage.nvme_paths = std::move(dirs).value();
  }
  c.zero.stage = f.zero_stage;
  // --comm auto is resolved once the device and the ranks are known (open_device_comm).
  c.zero.collectives = f.comm == "nccl" ? engine::Collectives::kDevice : engine::Collectives::kHost;
  c.precision = f.precision == "fp16"   ? DType::kF16
                : f.precision == "fp32" ? DType::kF32
                                        : DType::kBF16;
  c.schedule.kind = f.schedule == "serial" ? engine::Schedule::kSerial : engine::Schedule::kPlanned;
  c.optimizer.offload = home(f.offload_optimizer);
  c.optimizer.nvme_fraction = f.nvme_fraction;
  c.optimizer.gpu_fraction = f.gpu_optimizer_fraction;
  if (!f.offload_param.empty()) c.zero.offload_param = home(f.offload_param);
  c.zero.param_gpu_fraction = f.param_gpu_fraction;
  c.zero.offload_activations = home(f.offload_activations);
  c.zero.prefetch_depth = f.prefetch_depth;
  c.zero.bucket_bytes = static_cast<uint64_t>(f.bucket_mb * (1 << 20));
  c.zero.persistence_threshold = f.persistence_threshold;
  c.optimizer.delayed_update_warmup = f.delayed_update ? f.delayed_update_warmup : -1;
  c.schedule.grad_accum = f.grad_accum;
  c.schedule.microbatch_order = f.microbatch_order == "layer"  ? engine::MicrobatchOrder::kLayer
                                : f.microbatch_order == "auto" ? engine::MicrobatchOrder::kAuto
                                                               : engine::MicrobatchOrder::kMicro;
  c.schedule.device_grad_sum = f.device_grad_sum;
  c.offload_auto = f.auto_plan;
  c.schedule.grad_accum_dtype = f.grad_accum_dtype == "fp32"   ? DType::kF32
                                : f.grad_accum_dtype == "fp16" ? DType::kF16
                                : f.grad_accum_dtype == "bf16" ? DType::kBF16
                                                               : DType::kF32;
  c.optimizer.grad_clip = f.grad_clip;
  if (f.loss_scale != "dynamic")
    c.loss_scaling.loss_scale = std::strtod(f.loss_scale.c_str(), nullptr);
  c.loss_scaling.initial_scale_power = f.initial_scale_power;
  c.loss_scaling.loss_scale_window = f.loss_scale_window;
  c.loss_scaling.hysteresis = f.hysteresis;
  c.loss_scaling.consecutive_hysteresis = f.consecutive_hysteresis;
  c.loss_scaling.min_loss_scale = f.min_loss_scale;
  c.optimizer.adam.lr = f.lr;
  c.optimizer.adam.weight_decay = f.weight_decay;
  c.optimizer.adam.beta1 = f.beta1;
  c.optimizer.adam.beta2 = f.beta2;
  c.optimizer.adam.eps = f.eps;
  c.optimizer.adam.mode = f.adam_mode == "adam" ? cpu::AdamMode::kAdam : cpu::AdamMode::kAdamW;
  c.optimizer.adam.bias_correction = !f.no_bias_correction;
  c.optimizer.decay_on = f.weight_decay_on == "matrices"       ? model::DecayRule::kMatrices
                         : f.weight_decay_on == "no-bias-norm" ? model::DecayRule::kNoBiasNorm
                                                               : model::DecayRule::kAll;
  c.storage.gpu_memory_limit = f.gpu_memory_limit;
  c.storage.host_memory_limit = f.host_memory_limit;
  c.storage.nvme_block_size = f.nvme_block_size;
  c.storage.nvme_queue_depth = f.nvme_queue_depth;
  c.storage.nvme_buffer_count = f.nvme_buffer_count;
  return c;
}

}  // namespace strata::train_gpt

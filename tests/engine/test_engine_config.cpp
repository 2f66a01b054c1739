// EngineConfig::validate (each refusal one line, kConfig, naming the field the case breaks and
// its value) and render_fields (field references replaced, anything else between backticks left
// as it is).
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/config_exchange.h"
#include "engine/engine_config.h"

namespace strata::engine {
namespace {

struct Refusal {
  const char* what;
  std::function<void(EngineConfig&)> set;
  Field field;            // the field the message must name first
  const char* also = "";  // and this text
};

TEST(EngineConfig, DefaultsAreAccepted) {
  EXPECT_TRUE(EngineConfig{}.validate().ok());
  EngineConfig c;
  c.zero.stage = 3;
  c.zero.offload_param = Home::kNvme;
  c.optimizer.offload = Home::kNvme;
  c.optimizer.nvme_fraction = 0.5;
  c.optimizer.gpu_fraction = 0.5;
  c.zero.offload_activations = Home::kNvme;
  c.storage.nvme_paths = {"a", "b"};
  c.zero.param_gpu_fraction = 0.25;
  EXPECT_TRUE(c.validate().ok()) << c.validate().to_string();
}

TEST(EngineConfig, EachRefusalNamesTheField) {
  const std::vector<Refusal> cases = {
      {"stage 4", [](EngineConfig& c) { c.zero.stage = 4; }, Field::kZeroStage, " 4 "},
      {"the offload settings left to the planner at stage 2",
       [](EngineConfig& c) {
         c.zero.stage = 2;
         c.offload_auto = true;
       },
       Field::kOffloadAuto, "`zero.stage` 3"},
      {"static scale in bf16", [](EngineConfig& c) { c.loss_scaling.loss_scale = 512; },
       Field::kLossScale, "fp16"},
      {"optimizer on nvme without a path",
       [](EngineConfig& c) { c.optimizer.offload = Home::kNvme; }, Field::kOffloadOptimizer,
       "`storage.nvme_paths`"},
      {"activations on nvme without a path",
       [](EngineConfig& c) { c.zero.offload_activations = Home::kNvme; },
       Field::kOffloadActivations, "`storage.nvme_paths`"},
      {"params on nvme without a path",
       [](EngineConfig& c) {
         c.zero.stage = 3;
         c.zero.offload_param = Home::kNvme;
       },
       Field::kOffloadParam, "`storage.nvme_paths`"},
      {"device optimizer, serial",
       [](EngineConfig& c) {
         c.optimizer.offload = Home::kDevice;
         c.schedule.kind = Schedule::kSerial;
       },
       Field::kOffloadOptimizer, "`schedule.kind` planned"},
      {"stage 1, serial",
       [](EngineConfig& c) {
         c.zero.stage = 1;
         c.schedule.kind = Schedule::kSerial;
       },
       Field::kZeroStage, "`schedule.kind` planned"},
      {"accumulation 0", [](EngineConfig& c) { c.schedule.grad_accum = 0; }, Field::kGradAccum},
      {"accumulation with the delayed update",
       [](EngineConfig& c) {
         c.schedule.grad_accum = 2;
         c.optimizer.delayed_update_warmup = 3;
       },
       Field::kGradAccum, "`optimizer.delayed_update_warmup`"},
      {"gpu fraction 2", [](EngineConfig& c) { c.optimizer.gpu_fraction = 2; },
       Field::kGpuOptimizerFraction, " 2 "},
      {"gpu fraction with the optimizer on the device",
       [](EngineConfig& c) {
         c.optimizer.offload = Home::kDevice;
         c.optimizer.gpu_fraction = 0.5;
       },
       Field::kGpuOptimizerFraction, "`optimizer.offload` cpu or nvme"},
      {"fractions above 1",
       [](EngineConfig& c) {
         c.optimizer.offload = Home::kNvme;
         c.storage.nvme_paths = {"d"};
         c.optimizer.nvme_fraction = 0.75;
         c.optimizer.gpu_fraction = 0.5;
       },
       Field::kGpuOptimizerFraction, "`optimizer.nvme_fraction` 0.75"},
      {"nvme fraction without nvme", [](EngineConfig& c) { c.optimizer.nvme_fraction = 0.5; },
       Field::kOptimizerNvmeFraction, "`optimizer.offload` nvme"},
      {"offload_param at stage 2",
       [](EngineConfig& c) {
         c.zero.stage = 2;
         c.zero.offload_param = Home::kPinned;
       },
       Field::kOffloadParam, "`zero.stage` 3"},
      {"param fraction with the shards on the device",
       [](EngineConfig& c) {
         c.zero.stage = 3;
         c.zero.offload_param = Home::kDevice;
         c.zero.param_gpu_fraction = 0.5;
       },
       Field::kParamGpuFraction, "`zero.offload_param` cpu or nvme"},
      {"delayed update at stage 3",
       [](EngineConfig& c) {
         c.zero.stage = 3;
         c.optimizer.delayed_update_warmup = 0;
       },
       Field::kDelayedUpdate, "`zero.stage` 0, 1 or 2"},
      {"delayed update with the device optimizer",
       [](EngineConfig& c) {
         c.optimizer.delayed_update_warmup = 0;
         c.optimizer.offload = Home::kDevice;
       },
       Field::kDelayedUpdate, "`optimizer.offload` none"},
      {"prefetch 65", [](EngineConfig& c) { c.zero.prefetch_depth = 65; }, Field::kPrefetchDepth},
      {"negative clip", [](EngineConfig& c) { c.optimizer.grad_clip = -1; }, Field::kGradClip},
      {"block size 1000", [](EngineConfig& c) { c.storage.nvme_block_size = 1000; },
       Field::kNvmeBlockSize, "4096"},
      {"queue depth 0", [](EngineConfig& c) { c.storage.nvme_queue_depth = 0; },
       Field::kNvmeQueueDepth},
      {"65 buffers", [](EngineConfig& c) { c.storage.nvme_buffer_count = 65; },
       Field::kNvmeBufferCount},
  };
  for (const Refusal& r : cases) {
    SCOPED_TRACE(r.what);
    EngineConfig c;
    r.set(c);
    const Status st = c.validate();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), ErrorCode::kConfig);
    const std::string m = st.message();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.rfind(ref(r.field), 0), 0u) << m;  // the message starts with the field
    EXPECT_NE(m.find(r.also), std::string::npos) << m;
  }
}

TEST(EngineConfig, RenderFieldsReplacesOnlyFieldReferences) {
  const auto upper = [](Field f) { return "<" + std::string(field_name(f)) + ">"; };
  EXPECT_EQ(render_fields("`zero.stage` 4 needs `schedule.kind` planned", upper),
            "<zero.stage> 4 needs <schedule.kind> planned");
  EXPECT_EQ(render_fields("keep `not_a_field` and a lone ` quote", upper),
            "keep `not_a_field` and a lone ` quote");
  EXPECT_EQ(render_fields("", upper), "");
  EXPECT_EQ(render_fields("a ` b `optimizer.adam.lr` c", upper), "a ` b <optimizer.adam.lr> c");
  for (int f = 0; f < kNumFields; ++f) {
    EXPECT_EQ(render_fields(ref(Field(f)), upper), upper(Field(f)));
  }
}

// A config unlike the default in every field.
EngineConfig unusual() {
  EngineConfig c;
  c.zero.stage = 3;
  c.precision = DType::kF16;
  c.schedule.kind = Schedule::kPlanned;
  c.optimizer.offload = Home::kNvme;
  c.optimizer.nvme_fraction = 0.375;
  c.optimizer.gpu_fraction = 0.1;  // not a binary fraction: the text must keep every bit
  c.zero.offload_param = Home::kNvme;
  c.zero.param_gpu_fraction = 1.0 / 3.0;
  c.zero.offload_activations = Home::kPinned;
  c.zero.prefetch_depth = 5;
  c.zero.bucket_bytes = (uint64_t{1} << 40) + 3;
  c.zero.persistence_threshold = 12345;
  c.zero.collectives = Collectives::kDevice;
  c.optimizer.delayed_update_warmup = -1;
  c.schedule.grad_accum = 7;
  c.schedule.microbatch_order = MicrobatchOrder::kLayer;
  c.schedule.device_grad_sum = true;
  c.optimizer.grad_clip = 0.3f;
  c.loss_scaling.loss_scale = 0.0;
  c.loss_scaling.initial_scale_power = 12;
  c.loss_scaling.loss_scale_window = 77;
  c.loss_scaling.hysteresis = 4;
  c.loss_scaling.min_loss_scale = 1.0 / 1024;
  c.loss_scaling.consecutive_hysteresis = true;
  c.optimizer.adam.lr = 1.234567e-4f;
  c.optimizer.adam.beta1 = 0.85f;
  c.optimizer.adam.beta2 = 0.9876f;
  c.optimizer.adam.eps = 3e-9f;
  c.optimizer.adam.weight_decay = 0.1f;
  c.optimizer.adam.mode = cpu::AdamMode::kAdam;
  c.optimizer.adam.bias_correction = false;
  c.optimizer.decay_on = model::DecayRule::kNoBiasNorm;
  c.schedule.grad_accum_dtype = c.precision;
  c.storage.gpu_memory_limit = uint64_t{80} << 30;
  c.storage.host_memory_limit = (uint64_t{3} << 30) + 1;
  c.storage.nvme_paths = {"/a b", "c,d"};
  c.storage.nvme_block_size = 8192;
  c.storage.nvme_queue_depth = 64;
  c.storage.nvme_buffer_count = 5;
  c.offload_auto = true;
  return c;
}

TEST(EngineConfig, JsonRoundTripKeepsEveryField) {
  const EngineConfig c = unusual();
  auto back = config_from_json(config_to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  // Compared field by field through the JSON of both (every field is in it), and a few
  // directly, bit for bit.
  EXPECT_EQ(config_to_json(*back), config_to_json(c));
  EXPECT_EQ(back->optimizer.gpu_fraction, c.optimizer.gpu_fraction);
  EXPECT_EQ(back->zero.param_gpu_fraction, c.zero.param_gpu_fraction);
  EXPECT_EQ(back->optimizer.adam.lr, c.optimizer.adam.lr);
  EXPECT_EQ(back->zero.bucket_bytes, c.zero.bucket_bytes);
  EXPECT_EQ(back->storage.nvme_paths, c.storage.nvme_paths);
  EXPECT_EQ(back->zero.offload_param, c.zero.offload_param);
  EXPECT_EQ(back->optimizer.adam.mode, c.optimizer.adam.mode);
  EXPECT_EQ(back->optimizer.decay_on, c.optimizer.decay_on);
  // The default config differs from it in every field the JSON holds, and it holds every field.
  const nlohmann::json d = config_to_json(EngineConfig{}), u = config_to_json(c);
  EXPECT_EQ(u.size(), size_t(kNumFields));
  for (const auto& [k, v] : u.items()) {
    if (k == "schedule.kind" || k == "optimizer.delayed_update_warmup" ||
        k == "loss_scaling.loss_scale")
      continue;
    EXPECT_NE(d.value(k, nlohmann::json()), v) << k << " is the default's: it proves nothing";
  }
}

TEST(EngineConfig, EachFieldIsNamedByItsMemberOnce) {
  EXPECT_EQ(field_name(Field::kZeroStage), "zero.stage");
  EXPECT_EQ(field_name(Field::kLr), "optimizer.adam.lr");
  EXPECT_EQ(field_name(Field::kLossScale), "loss_scaling.loss_scale");
  EXPECT_EQ(field_name(Field::kNvmePath), "storage.nvme_paths");
  EXPECT_EQ(field_name(Field::kDelayedUpdate), "optimizer.delayed_update_warmup");
  std::set<std::string_view> names;
  for (int f = 0; f < kNumFields; ++f) names.insert(field_name(Field(f)));
  EXPECT_EQ(names.size(), size_t(kNumFields));
}

TEST(EngineConfig, JsonWithoutAFieldIsRefusedNamingIt) {
  nlohmann::json j = config_to_json(unusual());
  j.erase("zero.prefetch_depth");
  auto r = config_from_json(j);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("zero.prefetch_depth"), std::string::npos)
      << r.status().message();
  j = config_to_json(unusual());
  j["schedule.grad_accum"] = "seven";
  EXPECT_FALSE(config_from_json(j).ok());
}

}  // namespace
}  // namespace strata::engine

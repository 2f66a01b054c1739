// EngineConfig::validate (each refusal one line, kConfig, naming the field the case breaks and
// its value) and render_fields (field references replaced, anything else between backticks left
// as it is).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

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
  c.zero_stage = 3;
  c.offload_param = Home::kNvme;
  c.offload_optimizer = Home::kNvme;
  c.optimizer_nvme_fraction = 0.5;
  c.gpu_optimizer_fraction = 0.5;
  c.offload_activations = Home::kNvme;
  c.nvme_paths = {"a", "b"};
  c.param_gpu_fraction = 0.25;
  EXPECT_TRUE(c.validate().ok()) << c.validate().to_string();
}

TEST(EngineConfig, EachRefusalNamesTheField) {
  const std::vector<Refusal> cases = {
      {"stage 4", [](EngineConfig& c) { c.zero_stage = 4; }, Field::kZeroStage, " 4 "},
      {"static scale in bf16", [](EngineConfig& c) { c.loss_scaling.loss_scale = 512; },
       Field::kLossScale, "fp16"},
      {"optimizer on nvme without a path",
       [](EngineConfig& c) { c.offload_optimizer = Home::kNvme; }, Field::kOffloadOptimizer,
       "`nvme_path`"},
      {"activations on nvme without a path",
       [](EngineConfig& c) { c.offload_activations = Home::kNvme; }, Field::kOffloadActivations,
       "`nvme_path`"},
      {"params on nvme without a path",
       [](EngineConfig& c) {
         c.zero_stage = 3;
         c.offload_param = Home::kNvme;
       },
       Field::kOffloadParam, "`nvme_path`"},
      {"device optimizer, serial",
       [](EngineConfig& c) {
         c.offload_optimizer = Home::kDevice;
         c.schedule = Schedule::kSerial;
       },
       Field::kOffloadOptimizer, "`schedule` planned"},
      {"stage 1, serial",
       [](EngineConfig& c) {
         c.zero_stage = 1;
         c.schedule = Schedule::kSerial;
       },
       Field::kZeroStage, "`schedule` planned"},
      {"accumulation 0", [](EngineConfig& c) { c.grad_accum = 0; }, Field::kGradAccum},
      {"accumulation with the delayed update",
       [](EngineConfig& c) {
         c.grad_accum = 2;
         c.delayed_update_warmup = 3;
       },
       Field::kGradAccum, "`delayed_update`"},
      {"gpu fraction 2", [](EngineConfig& c) { c.gpu_optimizer_fraction = 2; },
       Field::kGpuOptimizerFraction, " 2 "},
      {"gpu fraction with the optimizer on the device",
       [](EngineConfig& c) {
         c.offload_optimizer = Home::kDevice;
         c.gpu_optimizer_fraction = 0.5;
       },
       Field::kGpuOptimizerFraction, "`offload_optimizer` cpu or nvme"},
      {"fractions above 1",
       [](EngineConfig& c) {
         c.offload_optimizer = Home::kNvme;
         c.nvme_paths = {"d"};
         c.optimizer_nvme_fraction = 0.75;
         c.gpu_optimizer_fraction = 0.5;
       },
       Field::kGpuOptimizerFraction, "`optimizer_nvme_fraction` 0.75"},
      {"nvme fraction without nvme", [](EngineConfig& c) { c.optimizer_nvme_fraction = 0.5; },
       Field::kOptimizerNvmeFraction, "`offload_optimizer` nvme"},
      {"offload_param at stage 2",
       [](EngineConfig& c) {
         c.zero_stage = 2;
         c.offload_param = Home::kPinned;
       },
       Field::kOffloadParam, "`zero_stage` 3"},
      {"param fraction with the shards on the device",
       [](EngineConfig& c) {
         c.zero_stage = 3;
         c.offload_param = Home::kDevice;
         c.param_gpu_fraction = 0.5;
       },
       Field::kParamGpuFraction, "`offload_param` cpu or nvme"},
      {"delayed update at stage 3",
       [](EngineConfig& c) {
         c.zero_stage = 3;
         c.delayed_update_warmup = 0;
       },
       Field::kDelayedUpdate, "`zero_stage` 0, 1 or 2"},
      {"delayed update with the device optimizer",
       [](EngineConfig& c) {
         c.delayed_update_warmup = 0;
         c.offload_optimizer = Home::kDevice;
       },
       Field::kDelayedUpdate, "`offload_optimizer` none"},
      {"prefetch 65", [](EngineConfig& c) { c.prefetch_depth = 65; }, Field::kPrefetchDepth},
      {"negative clip", [](EngineConfig& c) { c.grad_clip = -1; }, Field::kGradClip},
      {"block size 1000", [](EngineConfig& c) { c.nvme_block_size = 1000; }, Field::kNvmeBlockSize,
       "4096"},
      {"queue depth 0", [](EngineConfig& c) { c.nvme_queue_depth = 0; }, Field::kNvmeQueueDepth},
      {"65 buffers", [](EngineConfig& c) { c.nvme_buffer_count = 65; }, Field::kNvmeBufferCount},
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
  EXPECT_EQ(render_fields("`zero_stage` 4 needs `schedule` planned", upper),
            "<zero_stage> 4 needs <schedule> planned");
  EXPECT_EQ(render_fields("keep `not_a_field` and a lone ` quote", upper),
            "keep `not_a_field` and a lone ` quote");
  EXPECT_EQ(render_fields("", upper), "");
  for (int f = 0; f < kNumFields; ++f) {
    EXPECT_EQ(render_fields(ref(Field(f)), upper), upper(Field(f)));
  }
}

}  // namespace
}  // namespace strata::engine

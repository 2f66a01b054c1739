// bench_zero's stacks (zero_stack.h).
#include "zero_stack.h"

#include <algorithm>

#include "bench_util.h"
#include "gpu/cpu_device.h"
#include "model/init.h"
#include "model/synthetic_task.h"

namespace strata::bench_zero {
namespace {
STRATA_BENCH_CHECKS("bench_zero")
}  // namespace

std::unique_ptr<gpu::Device> make_device(double link, double cuda_gib, comm::Communicator& world) {
  gpu::DeviceOptions o;
  if (cuda_gib > 0) {
    o.ordinal = world.local_rank() % std::max(1, gpu::cuda_device_count());
    o.memory_limit_bytes = static_cast<size_t>(cuda_gib * double(size_t{1} << 30));
    return check(gpu::create_device(gpu::DeviceKind::kCuda, o));
  }
  o.threads = 1;
  o.memory_limit_bytes = size_t{2} << 30;
  o.link_bytes_per_s = link;
  return check(gpu::create_cpu_device(o));
}

Stack make_stack(const Shape& s, int stage, double nvme_fraction, const std::string& nvme_dir,
                 double link, comm::Communicator& world, engine::Home offload_param,
                 double cuda_gib) {
  Stack st;
  st.dev = make_device(link, cuda_gib, world);
  model::GptConfig cfg;
  cfg.vocab = model::AdditionTask::kVocab;
  cfg.max_seq = s.seq;
  cfg.layers = s.layers;
  cfg.heads = s.heads;
  cfg.channels = s.channels;
  cfg.dtype = DType::kBF16;
  engine::EngineConfig config;
  config.zero.stage = stage;
  config.precision = cfg.dtype;
  config.zero.prefetch_depth = s.prefetch_depth;
  config.optimizer.grad_clip = 1.0f;
  config.optimizer.adam.lr = 1e-4f;
  if (nvme_fraction > 0) {
    config.optimizer.offload = engine::Home::kNvme;
    config.optimizer.nvme_fraction = nvme_fraction;
    config.storage.nvme_paths = {nvme_dir};
  }
  if (stage == 3) config.zero.offload_param = offload_param;
  if (stage == 3 && offload_param == engine::Home::kNvme) config.storage.nvme_paths = {nvme_dir};
  config.schedule.grad_accum = s.micros;
  config.schedule.microbatch_order =
      s.layer_major ? engine::MicrobatchOrder::kLayer : engine::MicrobatchOrder::kMicro;
  config.schedule.device_grad_sum = s.device_grad_sum;
  // The model holds on the device only what the stage keeps there (as train_gpt does).
  auto layout =
      check(engine::Session::prepare(config, model::GptModel::block_numels(cfg), world.size()));
  st.model = check(model::GptModel::create(
      *st.dev, cfg, model::RunShape{s.batch, s.seq, s.checkpoint}, layout.storage));
  check(st.model->init_params(5));
  engine::SessionInputs inputs;
  inputs.host_threads = 1;
  inputs.init = engine::slices_of([&cfg](int64_t b) { return model::init_block(cfg, b, 5); });
  st.session = check(engine::Session::create(config, *st.dev, world, *st.model, inputs));
  st.step = st.session->zero();
  return st;
}

}  // namespace strata::bench_zero

// planner::choose (planner/choose.h): the one call that resolves every auto value of a config.
// Checked against the rules its header states, on a small GPT planned on the CpuDevice with
// fixed rates (nothing measured): what it leaves alone, the orders it resolves without planning,
// the order it plans (the segment-major one only when predicted faster by more than 1%, each
// order planned here on its own), the offload search (a fitting candidate within 1% of the
// fastest fitting one, the config's other settings kept, a session accepting it) and the refusal
// when nothing fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "comm/local_comm.h"
#include "engine/config_exchange.h"
#include "engine/session.h"
#include "gpu/cpu_device.h"
#include "model/gpt.h"
#include "planner/choose.h"

namespace strata::planner {
namespace {

using engine::EngineConfig;
using engine::Home;
using engine::MicrobatchOrder;

model::GptConfig gpt() {
  model::GptConfig cfg;
  cfg.vocab = 96;
  cfg.max_seq = 32;
  cfg.layers = 4;
  cfg.heads = 4;
  cfg.channels = 64;
  cfg.dtype = DType::kBF16;
  return cfg;
}

ModelPlanning planning() {
  ModelPlanning m;
  m.block_numels = model::GptModel::block_numels(gpt());
  m.layers = gpt().layers;
  m.shape = model::RunShape{4, 32, 2};
  m.create = [](gpu::Device& device, const model::RunShape& shape,
                const model::BlockStorage& storage) -> Result<std::unique_ptr<model::Model>> {
    STRATA_ASSIGN_OR_RETURN(auto gpt_model, model::GptModel::create(device, gpt(), shape, storage));
    return std::unique_ptr<model::Model>(std::move(gpt_model));
  };
  return m;
}

// Every kind of work at a finite rate: each plan has a prediction.
sched::Rates rates() {
  sched::Rates r;
  for (double& x : r.per_second) x = 1e9;
  r.per_second[int(sched::Work::kFlops)] = 2e10;
  r.task_overhead_s = 2e-6;
  return r;
}

struct Machine {
  std::unique_ptr<gpu::Device> device;
  std::unique_ptr<comm::Communicator> comm = comm::create_local_comm();
  SearchContext ctx;
  explicit Machine(size_t device_bytes = 512 << 20) {
    gpu::DeviceOptions o;
    o.memory_limit_bytes = device_bytes;
    o.threads = 1;
    device = gpu::create_cpu_device(o).value();
    ctx.real = device.get();
    ctx.comm = comm.get();
    ctx.rates = rates();
  }
};

EngineConfig stage3(int64_t micro) {
  EngineConfig c;
  c.zero.stage = 3;
  c.schedule.grad_accum = micro;
  c.optimizer.adam.lr = 0.25f;
  c.optimizer.grad_clip = 0.5f;
  return c;
}

TEST(Choose, SaysWhatIsLeftToIt) {
  EngineConfig c = stage3(2);
  EXPECT_FALSE(has_auto(c));
  EXPECT_FALSE(needs_rates(c));
  c.schedule.microbatch_order = MicrobatchOrder::kAuto;
  EXPECT_TRUE(has_auto(c));
  EXPECT_TRUE(needs_rates(c));        // two micro-batches: both orders are planned
  c.schedule.device_grad_sum = true;  // only the segment-major order has it
  EXPECT_FALSE(needs_rates(c));
  c = stage3(1);
  c.schedule.microbatch_order = MicrobatchOrder::kAuto;
  EXPECT_FALSE(needs_rates(c));  // one micro-batch: one order
  c = stage3(2);
  c.zero.stage = 2;
  c.schedule.microbatch_order = MicrobatchOrder::kAuto;
  c.optimizer.delayed_update_warmup = 0;  // not with the segment-major order
  EXPECT_FALSE(needs_rates(c));
  c = stage3(1);
  c.offload_auto = true;
  EXPECT_TRUE(has_auto(c));
  EXPECT_TRUE(needs_rates(c));
}

// Rank 0 of two, for plans only: a plan-only session reads the ranks and starts no collective.
class TwoRanksToPlan : public comm::Communicator {
 public:
  TwoRanksToPlan() : comm::Communicator(comm::CommOptions{}) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 2; }
  std::string_view backend() const override { return "plan"; }
  [[noreturn]] void abort(const Status& reason) override {
    ADD_FAILURE() << "abort: " << reason.to_string();
    std::abort();
  }

 protected:
  Result<std::unique_ptr<comm::PendingOp>> start_impl(const comm::CollectiveCall&) override {
    return make_error(ErrorCode::kInternal, "a plan-only session started a collective");
  }
};

// zero.collectives auto: with several ranks both places are planned and the device taken when
// predicted faster (at equal rates it moves the shards, not whole blocks, over PCIe); with slow
// device links the host; one rank: the host, without planning.
TEST(Choose, CollectivesOnTheDeviceOnlyWhenPredictedFaster) {
  Machine m;
  TwoRanksToPlan two;
  m.ctx.comm = &two;
  EngineConfig c = stage3(1);
  c.zero.collectives = engine::Collectives::kAuto;
  EXPECT_TRUE(has_auto(c));
  EXPECT_TRUE(needs_rates(c));
  Choice fast = choose({c, 2}, false, planning(), m.ctx);
  ASSERT_TRUE(fast.status.ok()) << fast.status.to_string();
  ASSERT_TRUE(fast.collectives);
  const CollectivesSearch& s = *fast.collectives;
  ASSERT_TRUE(s.why[0].ok() && s.why[1].ok());
  using sched::Work;
  auto work = [&](int k, Work w) { return s.planned[k].prediction.work[int(w)]; };
  // Each gather uploads half a block (two ranks); the collectives move as much either way, on
  // the device links instead of the network.
  EXPECT_NEAR(work(1, Work::kH2DBytes) * 2, work(0, Work::kH2DBytes),
              0.02 * work(0, Work::kH2DBytes));
  EXPECT_EQ(work(1, Work::kNetBytes) + work(1, Work::kLinkBytes), work(0, Work::kNetBytes));
  EXPECT_EQ(work(0, Work::kLinkBytes), 0.0);
  EXPECT_TRUE(s.device_faster);
  EXPECT_EQ(fast.settings.config.zero.collectives, engine::Collectives::kDevice);
  EXPECT_TRUE(fast.settings.config.validate(true).ok());
  // Device links a million times slower than the network: the host.
  for (Work w :
       {Work::kLinkBytes, Work::kLinkReduceBytes, Work::kLinkCalls, Work::kLinkReduceCalls}) {
    m.ctx.rates.per_second[int(w)] = 1e3;
  }
  Choice slow = choose({c, 2}, false, planning(), m.ctx);
  ASSERT_TRUE(slow.status.ok() && slow.collectives);
  EXPECT_FALSE(slow.collectives->device_faster);
  EXPECT_EQ(slow.settings.config.zero.collectives, engine::Collectives::kHost);
  // One rank: nothing to plan.
  Machine one;
  one.ctx.rates = sched::Rates{};
  Choice alone = choose({c, 2}, false, planning(), one.ctx);
  ASSERT_TRUE(alone.status.ok());
  EXPECT_FALSE(alone.collectives);
  EXPECT_EQ(alone.settings.config.zero.collectives, engine::Collectives::kHost);
}

TEST(Choose, LeavesAConfigWithoutAutoValuesAlone) {
  Machine m;
  const Settings base{stage3(2), 2};
  const Choice c = choose(base, false, planning(), m.ctx);
  ASSERT_TRUE(c.status.ok()) << c.status.to_string();
  EXPECT_FALSE(c.offload || c.order);
  EXPECT_EQ(engine::config_to_json(c.settings.config), engine::config_to_json(base.config));
  EXPECT_EQ(c.settings.checkpoint_interval, 2);
}

TEST(Choose, ResolvesAnOrderWithoutAnAlternativeWithoutPlanning) {
  Machine m;
  m.ctx.rates = sched::Rates{};  // no rates at all: planning would fail
  EngineConfig one = stage3(1);
  one.schedule.microbatch_order = MicrobatchOrder::kAuto;
  Choice c = choose({one, 2}, false, planning(), m.ctx);
  ASSERT_TRUE(c.status.ok());
  EXPECT_FALSE(c.order);
  EXPECT_EQ(c.settings.config.schedule.microbatch_order, MicrobatchOrder::kMicro);
  EngineConfig summed = stage3(2);
  summed.schedule.microbatch_order = MicrobatchOrder::kAuto;
  summed.schedule.device_grad_sum = true;
  c = choose({summed, 2}, false, planning(), m.ctx);
  ASSERT_TRUE(c.status.ok());
  EXPECT_FALSE(c.order);
  EXPECT_EQ(c.settings.config.schedule.microbatch_order, MicrobatchOrder::kLayer);
  EXPECT_TRUE(c.settings.config.validate(true).ok());
}

TEST(Choose, TakesTheSegmentMajorOrderOnlyWhenPredictedFaster) {
  Machine m;
  for (const bool offload_acts : {false, true}) {
    EngineConfig base = stage3(3);
    if (offload_acts) base.zero.offload_activations = Home::kPinned;
    base.schedule.microbatch_order = MicrobatchOrder::kAuto;
    const Choice c = choose({base, 2}, false, planning(), m.ctx);
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    ASSERT_TRUE(c.order);
    double step[2];
    for (int k = 0; k < 2; ++k) {
      Settings s{base, 2};
      s.config.schedule.microbatch_order =
          k == 1 ? MicrobatchOrder::kLayer : MicrobatchOrder::kMicro;
      auto planned = plan_candidate(s, planning(), m.ctx);
      ASSERT_TRUE(planned.ok()) << planned.status().to_string();
      ASSERT_TRUE(planned->fit.ok());
      step[k] = planned->prediction.step_s;
      EXPECT_EQ(c.order->planned[k].prediction.step_s, step[k]);
    }
    EXPECT_EQ(c.settings.config.schedule.microbatch_order,
              step[1] < 0.99 * step[0] ? MicrobatchOrder::kLayer : MicrobatchOrder::kMicro)
        << "micro " << step[0] << " s, layer " << step[1] << " s";
  }
}

TEST(Choose, OffloadAutoTakesAFittingCandidateWithinOnePercentOfTheFastest) {
  Machine m;
  EngineConfig base = stage3(2);
  base.offload_auto = true;
  base.schedule.microbatch_order = MicrobatchOrder::kAuto;
  const Choice c = choose({base, 0}, false, planning(), m.ctx);
  ASSERT_TRUE(c.status.ok()) << c.status.to_string();
  ASSERT_TRUE(c.offload);
  const EngineConfig& got = c.settings.config;
  EXPECT_FALSE(got.offload_auto);
  EXPECT_NE(got.schedule.microbatch_order, MicrobatchOrder::kAuto);
  // The settings the search does not own are the base's.
  EXPECT_EQ(got.zero.stage, 3);
  EXPECT_EQ(got.schedule.grad_accum, 2);
  EXPECT_EQ(got.optimizer.adam.lr, 0.25f);
  EXPECT_EQ(got.optimizer.grad_clip, 0.5f);
  EXPECT_NE(got.optimizer.offload, Home::kNvme);  // no NVMe directory was offered
  double fastest = 1e30;
  int fitting = 0;
  for (const Candidate& k : c.offload->candidates) {
    if (!k.fit.ok()) continue;
    ++fitting;
    fastest = std::min(fastest, k.prediction.step_s);
  }
  ASSERT_GT(fitting, 1);
  // The choice planned again on its own: it fits, and no fitting candidate is over 1% faster.
  auto again = plan_candidate(c.settings, planning(), m.ctx);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(again->fit.ok());
  EXPECT_LE(again->prediction.step_s, 1.01 * fastest);
}

TEST(Choose, OffloadAutoWithNothingFittingSaysSo) {
  Machine m(64 << 10);  // a 64 KiB device: no stage-3 setting fits
  EngineConfig base = stage3(1);
  base.offload_auto = true;
  const Choice c = choose({base, 0}, false, planning(), m.ctx);
  EXPECT_EQ(c.status.code(), ErrorCode::kOutOfMemory) << c.status.to_string();
  ASSERT_TRUE(c.offload);
  ASSERT_FALSE(c.offload->candidates.empty());
  EXPECT_EQ(c.offload->best, -1);
  for (const Candidate& k : c.offload->candidates) EXPECT_FALSE(k.fit.ok());
}

}  // namespace
}  // namespace strata::planner

#include "engine/offloaded_optimizer.h"

#include <gtest/gtest.h>
#include <oneapi/tbb/global_control.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "scratch_dir.h"

namespace strata::engine {
namespace {

struct Case {
  double fraction;
  nvme::IoEngine engine;
  DType grad_dtype;
  const char* name;
};

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> out(n);
  for (auto& x : out) x = d(rng);
  return out;
}

class OffloadedStep : public ::testing::TestWithParam<Case> {};

// The pipelined step over NVMe/host state gives the same bits as one CpuAdam::step over all of
// the state in RAM.
TEST_P(OffloadedStep, BitIdenticalToInRamCpuAdam) {
  const Case c = GetParam();
  // libtbb is not built with the thread sanitizer, so its own task hand-offs show up as races;
  // STRATA_TEST_SERIAL_TBB=1 keeps Adam on one thread so TSAN sees only strata's threads (the
  // swap store's I/O thread and its pool) racing with the compute.
  std::optional<tbb::global_control> serial;
  if (const char* e = std::getenv("STRATA_TEST_SERIAL_TBB"); e != nullptr && *e == '1') {
    serial.emplace(tbb::global_control::max_allowed_parallelism, 1);
  }
  const std::vector<int64_t> parts = {5000, 12345, 777, 65539, 20000, 4096, 33333, 1, 9000, 15001};
  const size_t total = static_cast<size_t>(std::accumulate(parts.begin(), parts.end(), int64_t{0}));
  cpu::AdamHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = 0.01f;
  const cpu::CpuAdam adam(hyper);

  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  nvme::SwapStoreOptions so;
  so.dirs = {dir.path()};
  so.capacity_bytes = 8ull << 20;
  so.extent_bytes = 256 << 10;
  so.block_bytes = 128 << 10;
  so.queue.engine = c.engine;
  auto store = nvme::SwapStore::open(so);
  ASSERT_TRUE(store.ok()) << store.status().to_string();

  OffloadedOptimizerOptions oo;
  oo.nvme_fraction = c.fraction;
  oo.store = store->get();
  auto opt = OffloadedOptimizer::create(parts, adam, oo);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  size_t on_nvme = 0;
  int64_t nvme_numel = 0, max_nvme_numel = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!opt->on_nvme(i)) continue;
    ++on_nvme;
    nvme_numel += parts[i];
    max_nvme_numel = std::max(max_nvme_numel, parts[i]);
  }
  if (c.fraction == 0.0) {
    EXPECT_EQ(on_nvme, 0u);
  } else if (c.fraction == 1.0) {
    EXPECT_EQ(on_nvme, parts.size());
  } else {
    // The NVMe share of elements is within half the largest partition of the fraction.
    EXPECT_NEAR(static_cast<double>(nvme_numel), c.fraction * static_cast<double>(total),
                0.5 * 65539);
    EXPECT_GT(on_nvme, 0u);
    EXPECT_LT(on_nvme, parts.size());
  }
  // Staging: 3 slots of 12 bytes per element of the largest NVMe partition, page-rounded.
  const uint64_t slot = (12 * static_cast<uint64_t>(max_nvme_numel) + 4095) / 4096 * 4096;
  EXPECT_EQ(opt->staging_bytes(), 3 * slot);
  EXPECT_EQ(opt->staging_bytes(), OffloadedOptimizer::staging_bound_bytes(3, max_nvme_numel));

  // Reference state: one flat in-RAM copy.
  auto ref_p = random_floats(total, 1, -1.f, 1.f);
  auto ref_m = random_floats(total, 2, -0.1f, 0.1f);
  auto ref_v = random_floats(total, 3, 0.f, 0.01f);
  size_t off = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    ASSERT_TRUE(opt->load(i, ref_p.data() + off, ref_m.data() + off, ref_v.data() + off).ok());
    off += static_cast<size_t>(parts[i]);
  }

  const size_t gsize = dtype_size(c.grad_dtype);
  std::vector<uint16_t> out(total), ref_out(total);
  for (int64_t step = 1; step <= 3; ++step) {
    const auto g32 = random_floats(total, 100 + static_cast<uint64_t>(step), -2.f, 2.f);
    std::vector<std::byte> g(total * gsize);
    if (c.grad_dtype == DType::kF32) {
      std::memcpy(g.data(), g32.data(), g.size());
    } else {
      auto* g16 = reinterpret_cast<uint16_t*>(g.data());
      for (size_t k = 0; k < total; ++k) g16[k] = f32_to_bf16(g32[k]);
    }
    const cpu::AdamStep st{step, 0.5f};
    cpu::AdamBuffers rb{ref_p.data(), ref_m.data(),   ref_v.data(), g.data(),
                        c.grad_dtype, ref_out.data(), DType::kBF16, static_cast<int64_t>(total)};
    ASSERT_TRUE(adam.step(rb, st).ok());

    std::vector<PartitionGrad> pg;
    off = 0;
    for (int64_t n : parts) {
      pg.push_back(
          PartitionGrad{g.data() + off * gsize, c.grad_dtype, out.data() + off, DType::kBF16});
      off += static_cast<size_t>(n);
    }
    const Status s = opt->step(pg, st);
    ASSERT_TRUE(s.ok()) << s.to_string();
    ASSERT_EQ(std::memcmp(out.data(), ref_out.data(), total * 2), 0) << "out16, step " << step;
  }
  std::vector<float> p(total), m(total), v(total);
  off = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    ASSERT_TRUE(opt->read_state(i, p.data() + off, m.data() + off, v.data() + off).ok());
    off += static_cast<size_t>(parts[i]);
  }
  EXPECT_EQ(std::memcmp(p.data(), ref_p.data(), total * 4), 0) << "params";
  EXPECT_EQ(std::memcmp(m.data(), ref_m.data(), total * 4), 0) << "exp_avg";
  EXPECT_EQ(std::memcmp(v.data(), ref_v.data(), total * 4), 0) << "exp_avg_sq";
}

INSTANTIATE_TEST_SUITE_P(
    Fractions, OffloadedStep,
    ::testing::Values(Case{0.0, nvme::IoEngine::kAuto, DType::kF32, "f0"},
                      Case{0.3, nvme::IoEngine::kAuto, DType::kF32, "f03"},
                      Case{1.0, nvme::IoEngine::kAuto, DType::kF32, "f1"},
                      Case{1.0, nvme::IoEngine::kAuto, DType::kBF16, "f1_bf16_grads"},
                      Case{0.3, nvme::IoEngine::kThreadPool, DType::kBF16, "f03_thread_pool"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(OffloadedOptimizer, IoErrorDuringStepIsReported) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  nvme::SwapStoreOptions so;
  so.dirs = {dir.path()};
  so.capacity_bytes = 8ull << 20;
  so.block_bytes = 64 << 10;
  auto store = nvme::SwapStore::open(so);
  ASSERT_TRUE(store.ok());
  OffloadedOptimizerOptions oo;
  oo.nvme_fraction = 1.0;
  oo.store = store->get();
  const std::vector<int64_t> parts = {30000, 30000, 30000, 30000};
  auto opt = OffloadedOptimizer::create(parts, cpu::CpuAdam(cpu::AdamHyper{}), oo);
  ASSERT_TRUE(opt.ok());
  std::vector<float> g(30000, 0.1f);
  std::vector<PartitionGrad> pg(parts.size(), PartitionGrad{g.data(), DType::kF32, nullptr});
  (*store)->set_fault_injection(nvme::FaultInjection{9, nvme::FaultKind::kEio});
  const Status st = opt->step(pg, cpu::AdamStep{1, 1.0f});
  EXPECT_EQ(st.code(), ErrorCode::kIo) << st.to_string();
  EXPECT_NE(st.message().find("optimizer partition"), std::string::npos) << st.message();
}

TEST(OffloadedOptimizer, BadOptionsAreConfigErrors) {
  OffloadedOptimizerOptions oo;
  oo.nvme_fraction = 1.5;
  EXPECT_EQ(OffloadedOptimizer::create({10}, cpu::CpuAdam(cpu::AdamHyper{}), oo).status().code(),
            ErrorCode::kConfig);
  oo.nvme_fraction = 0.5;  // NVMe share without a store
  EXPECT_EQ(
      OffloadedOptimizer::create({10, 10}, cpu::CpuAdam(cpu::AdamHyper{}), oo).status().code(),
      ErrorCode::kConfig);
  oo.nvme_fraction = 0.0;
  for (int slots : {0, 65}) {
    oo.staging_slots = slots;
    EXPECT_EQ(OffloadedOptimizer::create({10}, cpu::CpuAdam(cpu::AdamHyper{}), oo).status().code(),
              ErrorCode::kConfig);
  }
}

// One staging slot serves load()/read_state() and the per-partition calls; the pipelined
// step() needs three and says so.
TEST(OffloadedOptimizer, OneSlotStepsPartitionByPartition) {
  strata::test::ScratchDir dir;
  ASSERT_TRUE(dir.ok());
  nvme::SwapStoreOptions so;
  so.dirs = {dir.path()};
  so.capacity_bytes = 8ull << 20;
  auto store = nvme::SwapStore::open(so);
  ASSERT_TRUE(store.ok());
  OffloadedOptimizerOptions oo;
  oo.nvme_fraction = 1.0;
  oo.store = store->get();
  oo.staging_slots = 1;
  auto opt = OffloadedOptimizer::create({1000}, cpu::CpuAdam(cpu::AdamHyper{}), oo);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  std::vector<float> p(1000, 0.5f), g(1000, 0.1f);
  ASSERT_TRUE(opt->load(0, p.data(), nullptr, nullptr).ok());
  std::vector<PartitionGrad> pg(1, PartitionGrad{g.data(), DType::kF32, nullptr});
  EXPECT_EQ(opt->step(pg, cpu::AdamStep{1, 1.0f}).code(), ErrorCode::kConfig);
  // The same update through read_partition / step_partition / write_partition, against an
  // in-RAM CpuAdam on the same values.
  auto staging = cpu::default_pinned_pool().allocate(opt->state_bytes(0));
  ASSERT_TRUE(staging.ok());
  ASSERT_TRUE(opt->read_partition(0, staging->data()).wait().ok());
  ASSERT_TRUE(opt->step_partition(0, staging->data(), pg[0], cpu::AdamStep{1, 1.0f}).ok());
  ASSERT_TRUE(opt->write_partition(0, staging->data()).wait().ok());
  std::vector<float> want = p, m(1000, 0.0f), v(1000, 0.0f);
  ASSERT_TRUE(cpu::CpuAdam(cpu::AdamHyper{})
                  .step(cpu::AdamBuffers{want.data(), m.data(), v.data(), g.data(), DType::kF32,
                                         nullptr, DType::kBF16, 1000},
                        cpu::AdamStep{1, 1.0f})
                  .ok());
  std::vector<float> got(1000);
  ASSERT_TRUE(opt->read_state(0, got.data(), nullptr, nullptr).ok());
  EXPECT_EQ(got, want);
  // A RAM partition's call with staging (or an NVMe one's without) is refused.
  EXPECT_EQ(opt->step_partition(0, nullptr, pg[0], cpu::AdamStep{2, 1.0f}).code(),
            ErrorCode::kInternal);
}

}  // namespace
}  // namespace strata::engine

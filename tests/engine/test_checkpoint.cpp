// Checkpoints written while training goes on (engine/checkpoint.h, engine/partition_hold.h):
//   - PartitionHold: the default order, an update's wait making its partition the next pick, and
//     release waking the waiter;
//   - a save started and an optimizer step run at once (half the state on NVMe): the checkpoint
//     holds the state from before the step, bit for bit, and the step's result equals the same
//     step on a copy that was never checkpointed;
//   - a record naming a partition twice is refused naming the file;
//   - a save dropped without finish() leaves the previous checkpoint the newest complete one.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "comm/local_comm.h"
#include "engine/checkpoint.h"
#include "engine/partition_hold.h"
#include "scratch_dir.h"

namespace strata::engine {
namespace {

TEST(PartitionHold, DefaultOrderThenWhatAnUpdateWaitsFor) {
  PartitionHold hold(5);
  EXPECT_EQ(hold.pick(), 0u);
  hold.release(0);
  hold.wait(0);  // released: returns at once
  std::atomic<bool> woke{false};
  std::thread update([&] {
    hold.wait(3);
    woke = true;
  });
  for (int i = 0; i < 10000 && hold.waiting() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(hold.waiting(), 1u);
  EXPECT_EQ(hold.pick(), 3u);  // not 1: the update waits for 3
  EXPECT_FALSE(woke.load());
  hold.release(3);
  update.join();
  EXPECT_TRUE(woke.load());
  EXPECT_GT(hold.waited_seconds(), 0.0);
  EXPECT_EQ(hold.pick(), 1u);
  EXPECT_EQ(hold.pick(), 2u);
  EXPECT_EQ(hold.pick(), 4u);
  EXPECT_EQ(hold.pick(), std::nullopt);
  hold.release_all();
  hold.wait(4);
}

struct State {
  std::vector<std::vector<float>> p, m, v;
};

State read_all(OffloadedOptimizer& opt) {
  State s;
  for (size_t i = 0; i < opt.num_partitions(); ++i) {
    const auto n = static_cast<size_t>(opt.numel(i));
    s.p.emplace_back(n);
    s.m.emplace_back(n);
    s.v.emplace_back(n);
    EXPECT_TRUE(opt.read_state(i, s.p[i].data(), s.m[i].data(), s.v[i].data()).ok());
  }
  return s;
}

void expect_same(const State& a, const State& b, const char* what) {
  ASSERT_EQ(a.p.size(), b.p.size());
  for (size_t i = 0; i < a.p.size(); ++i) {
    const size_t bytes = a.p[i].size() * sizeof(float);
    EXPECT_EQ(std::memcmp(a.p[i].data(), b.p[i].data(), bytes), 0) << what << " master " << i;
    EXPECT_EQ(std::memcmp(a.m[i].data(), b.m[i].data(), bytes), 0) << what << " m " << i;
    EXPECT_EQ(std::memcmp(a.v[i].data(), b.v[i].data(), bytes), 0) << what << " v " << i;
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    nvme::SwapStoreOptions so;
    so.dirs = {dir_.path() + "/swap"};
    std::filesystem::create_directories(so.dirs[0]);
    so.capacity_bytes = 64ull << 20;
    auto store = nvme::SwapStore::open(so);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    store_ = std::move(store.value());
    root_ = dir_.path() + "/ck";
    std::filesystem::create_directories(root_);
    std::mt19937 rng(11);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (int64_t n : numel_) {
      const auto len = static_cast<size_t>(n);
      std::vector<float> p(len), m(len), v(len), gr(len);
      for (size_t k = 0; k < p.size(); ++k) {
        p[k] = g(rng);
        m[k] = 0.1f * g(rng);
        v[k] = 0.01f * std::abs(g(rng));
        gr[k] = g(rng);
      }
      init_.p.push_back(p);
      init_.m.push_back(m);
      init_.v.push_back(v);
      grads_.push_back(gr);
    }
  }
  OffloadedOptimizer make(double nvme_fraction, uint64_t key_base) {
    OffloadedOptimizerOptions oo;
    oo.nvme_fraction = nvme_fraction;
    oo.store = store_.get();
    oo.key_base = key_base;
    oo.register_staging = false;
    auto opt = OffloadedOptimizer::create(numel_, cpu::CpuAdam(cpu::AdamHyper{}), oo);
    EXPECT_TRUE(opt.ok()) << opt.status().to_string();
    for (size_t i = 0; i < numel_.size(); ++i) {
      EXPECT_TRUE(opt->load(i, init_.p[i].data(), init_.m[i].data(), init_.v[i].data()).ok());
    }
    return std::move(opt.value());
  }
  Status step(OffloadedOptimizer& opt) {
    std::vector<PartitionGrad> g(numel_.size());
    for (size_t i = 0; i < g.size(); ++i) g[i].grads = grads_[i].data();
    return opt.step(g, cpu::AdamStep{3, 1.0f});
  }
  Status save(OffloadedOptimizer& opt, int64_t step_no) {
    return save_checkpoint(root_, 0, *comm_, CheckpointInfo{step_no, 1, 3, "test", "{}"}, opt,
                           StepScaling::State{}, [](const std::string&) { return ok_status(); });
  }

  test::ScratchDir dir_;
  std::unique_ptr<nvme::SwapStore> store_;
  std::unique_ptr<comm::Communicator> comm_ = comm::create_local_comm();
  std::string root_;
  // Large enough that the writer is still busy when the step starts (the test is correct
  // whatever the interleaving; larger partitions make the overlap likely).
  std::vector<int64_t> numel_ = {300000, 70000, 500000, 1000, 250000, 400000};
  State init_;
  std::vector<std::vector<float>> grads_;
};

TEST_F(CheckpointTest, StepDuringTheWriteChangesNeitherTheCheckpointNorTheStep) {
  OffloadedOptimizer ref = make(0.0, 1000);
  ASSERT_TRUE(step(ref).ok());
  const State want_after = read_all(ref);

  OffloadedOptimizer opt = make(0.5, 0);
  ASSERT_GT(opt.nvme_state_bytes(), 0u);
  ASSERT_GT(opt.host_state_bytes(), 0u);
  auto save =
      start_checkpoint(root_, 0, *comm_, CheckpointInfo{7, 1, 3, "test", "{}"}, opt,
                       StepScaling::State{}, [](const std::string&) { return ok_status(); });
  ASSERT_TRUE(save.ok()) << save.status().to_string();
  ASSERT_TRUE(step(opt).ok());  // waits for each partition the writer still holds
  ASSERT_TRUE(save.value()->finish().ok());
  expect_same(read_all(opt), want_after, "stepped during the save");

  auto dir = find_checkpoint(root_);
  ASSERT_TRUE(dir.ok());
  EXPECT_TRUE(verify_checkpoint(*dir, 0, CheckpointInfo{0, 1, 3, "test", ""}).ok());
  OffloadedOptimizer back = make(0.5, 2000);
  for (size_t i = 0; i < numel_.size(); ++i)
    ASSERT_TRUE(back.load(i, nullptr, nullptr, nullptr).ok());
  auto loaded = load_checkpoint(*dir, 0, back);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_same(read_all(back), init_, "loaded");
}

TEST_F(CheckpointTest, RecordNamingAPartitionTwiceIsRefusedNamingTheFile) {
  OffloadedOptimizer opt = make(0.5, 0);
  ASSERT_TRUE(save(opt, 1).ok());
  const std::string dir = find_checkpoint(root_).value();
  const std::string file = dir + "/optimizer-rank0.bin";
  // The second record's index (after the magic, the head and the first record) set to the
  // first record's.
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  int64_t first[2] = {};
  f.seekg(8 + 16);
  f.read(reinterpret_cast<char*>(first), sizeof(first));
  f.seekp(8 + 16 + 16 + 12 * first[1]);
  f.write(reinterpret_cast<const char*>(first), 8);
  f.close();
  auto loaded = load_checkpoint(dir, 0, opt);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().to_string().find(file), std::string::npos)
      << loaded.status().to_string();
  EXPECT_NE(loaded.status().to_string().find("each once"), std::string::npos)
      << loaded.status().to_string();
}

TEST_F(CheckpointTest, DroppedSaveLeavesThePreviousCheckpoint) {
  OffloadedOptimizer opt = make(0.5, 0);
  ASSERT_TRUE(save(opt, 1).ok());
  {
    auto save =
        start_checkpoint(root_, 1, *comm_, CheckpointInfo{2, 1, 3, "test", "{}"}, opt,
                         StepScaling::State{}, [](const std::string&) { return ok_status(); });
    ASSERT_TRUE(save.ok());
  }  // dropped: the writer stopped, the optimizer released
  ASSERT_TRUE(step(opt).ok());
  auto dir = find_checkpoint(root_);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(std::filesystem::path(*dir).filename(), "step_00000001");
  // The next save removes the leftover and completes.
  ASSERT_TRUE(save(opt, 3).ok());
  EXPECT_EQ(std::filesystem::path(find_checkpoint(root_).value()).filename(), "step_00000003");
  EXPECT_FALSE(std::filesystem::exists(root_ + "/step_00000002.tmp"));
}

}  // namespace
}  // namespace strata::engine

// planner::calibrate over ranks (label mpi; mpirun -np 1 and 2): the ranks of a machine measure
// together, and their rates are kept apart from one rank's.
//   - an entry that any rank lacks is measured by every rank (a rank whose cache holds it too),
//     so that the ranks probe at the same time, as they will run;
//   - the cache's machine entry names the ranks on this machine when there are several, so that
//     a later run with another number of ranks does not take rates measured beside another load;
//   - every rank comes out with the same rates, the slowest rank's, and they are what is cached;
//   - a disk is known by its filesystem, not by the directory it was measured in (a fresh
//     temporary directory on it is not measured again), and entries of earlier forms (keyed
//     by paths, or without the requests' CPU) are dropped when the file is written; a request's
//     CPU is measured; rows of another form in an entry are left out (an entry with none left
//     is measured again).
// Each rank has its own cache file here, in a directory of its own (only rank 0 writes its file,
// as calibrate() does), so that the second calibration finds the entries on rank 0 only.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpu/cpu_device.h"
#include "mpi_world.h"
#include "planner/calibration.h"
#include "scratch_dir.h"
#include "tiny_calibration.h"

namespace strata::engine {
namespace {
using namespace ::strata::planner;  // the planner under test (src/planner)

comm::Communicator& world() { return comm::testing::mpi_world(); }

CalibrationRequest request(gpu::Device& device, const std::string& cache) {
  return planner::testing::tiny_calibration_request(device, world(), cache, DType::kF32);
}

// Each test: a scratch directory of this rank's own, its cache file, a one-thread CpuDevice.
class Calibration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir.ok());
    gpu::DeviceOptions dopt;
    dopt.threads = 1;
    auto d = gpu::create_cpu_device(dopt);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    device = std::move(*d);
  }
  comm::Communicator& comm = world();
  test::ScratchDir dir;
  const std::string cache = dir.path() + "/calibration.json";
  std::unique_ptr<gpu::Device> device;
};

TEST_F(Calibration, EntriesAnyRankLacksAreMeasuredByEveryRankUnderItsOwnMachineKey) {
  constexpr int kEntries = 4;  // compute, link, host, overhead (no disk without directories)

  // First: no rank has a cache.
  auto first = calibrate(request(*device, cache));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->measured, kEntries);
  EXPECT_EQ(first->cached, 0);

  // Second: rank 0 wrote its file; the others' caches are still empty.
  auto second = calibrate(request(*device, cache));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  if (comm.size() == 1) {
    EXPECT_EQ(second->measured, 0);
    EXPECT_EQ(second->cached, kEntries);
  } else {
    EXPECT_EQ(second->measured, kEntries) << "rank " << comm.rank();
    EXPECT_EQ(second->cached, 0) << "rank " << comm.rank();
  }

  // Every rank predicts with the same rates: the slowest rank's (a step waits for it at its
  // collectives).
  const sched::Rates& r = second->rates;
  std::vector<float> mine(sched::kNumWorkKinds + 1), all((sched::kNumWorkKinds + 1) * comm.size());
  for (int k = 0; k < sched::kNumWorkKinds; ++k) mine[k] = static_cast<float>(r.per_second[k]);
  mine[sched::kNumWorkKinds] = static_cast<float>(r.task_overhead_s);
  ASSERT_TRUE(comm.all_gather(mine.data(), all.data(), mine.size(), DType::kF32).ok());
  for (int q = 0; q < comm.size(); ++q) {
    for (size_t k = 0; k < mine.size(); ++k) {
      EXPECT_EQ(all[size_t(q) * mine.size() + k], mine[k]) << "rank " << q << ", rate " << k;
    }
  }
  for (const sched::Work w :
       {sched::Work::kFlops, sched::Work::kHostBytes, sched::Work::kAdamElements,
        sched::Work::kDeviceAdamElements, sched::Work::kDeviceBytes}) {
    EXPECT_GT(r.rate(w), 0.0) << sched::work_name(w);
  }
  // The network's four rates, measured with several ranks; one rank sends nothing.
  // The device links: the same measurement (no device communicator: the host one's).
  for (const sched::Work w :
       {sched::Work::kNetBytes, sched::Work::kNetReduceBytes, sched::Work::kNetCalls,
        sched::Work::kNetReduceCalls, sched::Work::kLinkBytes, sched::Work::kLinkReduceBytes,
        sched::Work::kLinkCalls, sched::Work::kLinkReduceCalls}) {
    if (comm.size() == 1) {
      EXPECT_EQ(r.rate(w), 1e30) << sched::work_name(w);
    } else {
      EXPECT_GT(r.rate(w), 0.0) << sched::work_name(w);
      EXPECT_LT(r.rate(w), 1e12) << sched::work_name(w);  // below a TB/s, a picosecond a call
    }
  }

  if (comm.rank() == 0) {
    std::ifstream in(cache);
    ASSERT_TRUE(in.good()) << cache;
    const nlohmann::json j = nlohmann::json::parse(in);
    ASSERT_EQ(j.size(), 1u) << j.dump();
    const std::string key = j.begin().key();
    const std::string sharing = std::to_string(comm.local_size()) + " ranks on this machine";
    if (comm.local_size() > 1) {
      EXPECT_NE(key.find(sharing), std::string::npos) << key;
    } else {
      EXPECT_EQ(key.find("ranks on this machine"), std::string::npos) << key;
    }
    EXPECT_EQ(j.begin()->size(), size_t(kEntries)) << j.dump();
    // Each entry is a list of measurements, the last one as agreed; the rates are the slowest
    // rank's median of its entry (rank 0: both measurements; the others: the second alone).
    for (const auto& [name, rows] : j.begin()->items()) {
      ASSERT_TRUE(rows.is_array() && !rows.empty() && rows.back().is_array()) << name;
      ASSERT_EQ(rows.size(), comm.size() == 1 ? 1u : 2u) << name;
      auto expect = [&](size_t i) {
        const double last = rows.back()[i].get<double>();
        const double median = 0.5 * (rows.front()[i].get<double>() + last);
        return name.rfind("overhead ", 0) == 0 ? std::max(median, last) : std::min(median, last);
      };
      if (name.rfind("compute ", 0) == 0) {
        EXPECT_FLOAT_EQ(float(expect(0)), float(r.rate(sched::Work::kFlops))) << name;
        EXPECT_FLOAT_EQ(float(expect(1)), float(r.rate(sched::Work::kFlopsHead))) << name;
      }
      if (name.rfind("overhead ", 0) == 0) {
        EXPECT_FLOAT_EQ(float(expect(0)), float(r.task_overhead_s)) << name;
      }
    }
  }
}

// Rank 0's string at every rank (raw bytes through a 16-bit broadcast, which copies).
std::string broadcast_text(comm::Communicator& comm, std::string text) {
  float size = static_cast<float>(text.size());
  EXPECT_TRUE(comm.broadcast(&size, 1, DType::kF32, 0).ok());
  const auto n = static_cast<size_t>(size);
  text.resize(n + n % 2);
  EXPECT_TRUE(comm.broadcast(text.data(), text.size() / 2, DType::kBF16, 0).ok());
  text.resize(n);
  return text;
}

// An entry keeps the last five measurements, and its value is their median: every rank's cache
// is seeded with five rows per entry (a base row times 3, 1, 5, 2, 4), so nothing is measured
// and the rates are the base times 3; --calibrate drops the oldest row for the new one.
TEST_F(Calibration, AnEntryIsTheMedianOfItsLastFiveMeasurements) {
  auto first = calibrate(request(*device, cache));
  ASSERT_TRUE(first.ok()) << first.status().to_string();

  // Rank 0's file, seeded, written into every rank's.
  std::string text;
  if (comm.rank() == 0) {
    std::ifstream in(cache);
    nlohmann::json j = nlohmann::json::parse(in);
    for (auto& [name, rows] : j.begin()->items()) {
      const std::vector<double> base = rows.back().get<std::vector<double>>();
      nlohmann::json seeded = nlohmann::json::array();
      for (double f : {3.0, 1.0, 5.0, 2.0, 4.0}) {
        std::vector<double> row = base;
        for (double& x : row) x *= f;
        seeded.push_back(row);
      }
      rows = seeded;
    }
    text = j.dump();
  }
  text = broadcast_text(comm, text);
  std::ofstream(cache) << text;
  const nlohmann::json seeded = nlohmann::json::parse(text);
  const nlohmann::json& entries = seeded.begin().value();

  auto second = calibrate(request(*device, cache));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->measured, 0);
  for (const auto& [name, rows] : entries.items()) {
    const double base = rows[1][0].get<double>();  // the row times 1
    if (name.rfind("compute ", 0) == 0) {
      EXPECT_FLOAT_EQ(float(second->rates.rate(sched::Work::kFlops)), float(3 * base)) << name;
    }
    if (name.rfind("overhead ", 0) == 0) {
      EXPECT_FLOAT_EQ(float(second->rates.task_overhead_s), float(3 * base)) << name;
    }
    if (name == "link") {
      EXPECT_FLOAT_EQ(float(second->rates.rate(sched::Work::kH2DBytes)), float(3 * base));
    }
  }

  CalibrationRequest rq = request(*device, cache);
  rq.redo = true;
  auto third = calibrate(rq);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  EXPECT_EQ(third->measured, 4);
  if (comm.rank() == 0) {
    std::ifstream in(cache);
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& [name, rows] : j.begin()->items()) {
      ASSERT_EQ(rows.size(), 5u) << name;
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(rows[i], entries[name][i + 1]) << name << " " << i;
    }
  }
}

TEST_F(Calibration, ADiskIsKnownByItsFilesystemNotItsDirectory) {
  const std::string a = dir.path() + "/a", b = dir.path() + "/b";
  ASSERT_TRUE(std::filesystem::create_directory(a) && std::filesystem::create_directory(b));
  constexpr int kEntries = 5;  // compute, link, host, overhead, disk
  CalibrationRequest rq = request(*device, cache);
  rq.nvme_dirs = {a};
  auto first = calibrate(rq);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->measured, kEntries);
  EXPECT_GT(first->rates.rate(sched::Work::kNvmeReadBytes), 0.0);
  // A request takes some CPU (its system calls at least), far less than a tenth of a second; a
  // byte's is at least zero, far less than a microsecond.
  EXPECT_GT(first->rates.nvme_cpu_op_s, 0.0);
  EXPECT_LT(first->rates.nvme_cpu_op_s, 0.1);
  EXPECT_GE(first->rates.nvme_cpu_byte_s, 0.0);
  EXPECT_LT(first->rates.nvme_cpu_byte_s, 1e-6);

  // Entries of earlier forms: keyed by a directory's path, or by its filesystem without the
  // requests' CPU.
  const std::string stale = "disk+requests block=1048576 depth=32 " + a;
  const std::string stale_fs = "disk+requests block=1048576 depth=32 ext4 id 1:2 dev 3:4";
  if (comm.rank() == 0) {
    nlohmann::json j;
    {
      std::ifstream in(cache);
      j = nlohmann::json::parse(in);
    }
    nlohmann::json& entries = j.begin().value();
    entries[stale] = {1.0, 2.0, 3.0};
    entries[stale_fs] = {1.0, 2.0, 3.0};
    // Rows of another form (another version's): beside a row of this one, left out; alone (the
    // link's two rates as three values), the entry is measured again.
    for (auto& [name, rows] : entries.items()) {
      if (name.rfind("disk+requests+cpu ", 0) == 0) {
        if (!rows[0].is_array()) rows = nlohmann::json::array({rows});
        rows.push_back(nlohmann::json::array({1.0, 2.0, 3.0}));  // the newest
      }
    }
    entries["link"] = nlohmann::json::array({nlohmann::json::array({1.0, 2.0, 3.0})});
    std::ofstream(cache) << j.dump();
  }

  rq.nvme_dirs = {b};
  auto second = calibrate(rq);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  if (comm.size() == 1) {  // (with more ranks the others' caches are empty: all measure again)
    EXPECT_EQ(second->measured, 1);  // the link
    EXPECT_EQ(second->cached, kEntries - 1);
    EXPECT_EQ(second->rates.rate(sched::Work::kNvmeReadBytes),
              first->rates.rate(sched::Work::kNvmeReadBytes));
  }

  rq.redo = true;  // measured again, so rank 0 writes its file
  ASSERT_TRUE(calibrate(rq).ok());
  if (comm.rank() == 0) {
    std::ifstream in(cache);
    const nlohmann::json j = nlohmann::json::parse(in);
    const nlohmann::json& entries = j.begin().value();
    EXPECT_FALSE(entries.contains(stale)) << entries.dump();
    EXPECT_FALSE(entries.contains(stale_fs)) << entries.dump();
    int disks = 0;
    for (const auto& [name, v] : entries.items()) disks += name.rfind("disk+requests", 0) == 0;
    EXPECT_EQ(disks, 1) << entries.dump();
  }
}

}  // namespace
}  // namespace strata::engine

// The rank-to-hardware split: on this machine and on hwloc synthetic topologies (deterministic
// packages / NUMA nodes), every core is covered exactly once for 1..N ranks, blocks are
// contiguous, balanced and NUMA-local where the rule says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "cpu/topology.h"

namespace strata::cpu {
namespace {

// Every core owned by exactly one rank when ranks <= cores; otherwise every core used.
void expect_partition(const Topology& topo, int ranks) {
  const int n = topo.num_cores();
  std::vector<int> owners(static_cast<size_t>(n), 0);
  std::set<int> pus;
  size_t min_len = SIZE_MAX;
  size_t max_len = 0;
  for (int r = 0; r < ranks; ++r) {
    auto p = topo.place(r, ranks);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_FALSE(p->cores.empty());
    EXPECT_EQ(p->shared, ranks > n);
    EXPECT_FALSE(p->cpuset.empty());
    EXPECT_GE(p->numa_node, 0);
    for (size_t i = 1; i < p->cores.size(); ++i) EXPECT_EQ(p->cores[i], p->cores[i - 1] + 1);
    for (int c : p->cores) {
      ASSERT_GE(c, 0);
      ASSERT_LT(c, n);
      ++owners[static_cast<size_t>(c)];
    }
    for (int pu : p->pus) {
      const bool fresh = pus.insert(pu).second;
      if (ranks <= n) {
        EXPECT_TRUE(fresh) << "PU " << pu << " given twice";
      }
    }
    min_len = std::min(min_len, p->cores.size());
    max_len = std::max(max_len, p->cores.size());
  }
  for (int c = 0; c < n; ++c) {
    if (ranks <= n) {
      EXPECT_EQ(owners[static_cast<size_t>(c)], 1) << "core " << c << " with " << ranks;
    } else {
      EXPECT_GE(owners[static_cast<size_t>(c)], 1);
    }
  }
  EXPECT_EQ(static_cast<int>(pus.size()), topo.num_pus());
}

TEST(Topology, ThisMachineSplitsWithoutOverlap) {
  auto topo = Topology::discover();
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  EXPECT_TRUE(topo->is_this_system());
  EXPECT_GE(topo->num_cores(), 1);
  EXPECT_GE(topo->num_pus(), topo->num_cores());
  for (int ranks = 1; ranks <= 4; ++ranks) expect_partition(*topo, ranks);
  auto one = topo->place(0, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(static_cast<int>(one->cores.size()), topo->num_cores());
  EXPECT_EQ(one->threads(), topo->num_pus());
}

TEST(Topology, SyntheticTwoPackagesWithHyperthreads) {
  auto topo = Topology::synthetic("pack:2 core:4 pu:2");
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  EXPECT_FALSE(topo->is_this_system());
  EXPECT_EQ(topo->num_packages(), 2);
  EXPECT_EQ(topo->num_cores(), 8);
  EXPECT_EQ(topo->num_pus(), 16);
  for (int ranks = 1; ranks <= 9; ++ranks) expect_partition(*topo, ranks);
  // 3 ranks on 8 cores, one NUMA node: blocks of 3, 3, 2 with both PUs of each core.
  auto p = topo->place(1, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->cores, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(p->pus, (std::vector<int>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(p->cpuset, "6-11");
  EXPECT_EQ(p->threads(), 6);
  EXPECT_FALSE(topo->bind_process(*p).ok());  // cannot bind to a synthetic machine
}

TEST(Topology, SyntheticNumaNodesAreKeptLocal) {
  auto topo = Topology::synthetic("pack:2 numa:1 core:4 pu:1");
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  ASSERT_EQ(topo->num_numa_nodes(), 2);
  for (int ranks = 1; ranks <= 8; ++ranks) expect_partition(*topo, ranks);
  // 3 ranks: node 0 gets two (2 + 2 cores), node 1 one (4 cores): no rank straddles nodes.
  std::vector<std::vector<int>> want = {{0, 1}, {2, 3}, {4, 5, 6, 7}};
  std::vector<int> want_node = {0, 0, 1};
  for (int r = 0; r < 3; ++r) {
    auto p = topo->place(r, 3);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->cores, want[static_cast<size_t>(r)]) << "rank " << r;
    EXPECT_EQ(p->numa_node, want_node[static_cast<size_t>(r)]) << "rank " << r;
  }
  // 1 rank gets everything; 2 ranks one node each.
  auto a = topo->place(0, 2);
  auto b = topo->place(1, 2);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->numa_node, 0);
  EXPECT_EQ(b->numa_node, 1);
  EXPECT_EQ(b->cores, (std::vector<int>{4, 5, 6, 7}));
}

TEST(Topology, FewerRanksThanNodesTakeWholeNodes) {
  auto topo = Topology::synthetic("pack:4 numa:1 core:2 pu:1");
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  ASSERT_EQ(topo->num_numa_nodes(), 4);
  auto p0 = topo->place(0, 3);
  auto p2 = topo->place(2, 3);
  ASSERT_TRUE(p0.ok() && p2.ok());
  EXPECT_EQ(p0->cores, (std::vector<int>{0, 1}));
  EXPECT_EQ(p2->cores, (std::vector<int>{4, 5, 6, 7}));  // nodes 2 and 3
  for (int ranks = 1; ranks <= 9; ++ranks) expect_partition(*topo, ranks);
}

TEST(Topology, BadRequestsAreErrors) {
  auto bad = Topology::synthetic("socket:banana");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("banana"), std::string::npos);
  auto topo = Topology::synthetic("core:2 pu:1");
  ASSERT_TRUE(topo.ok());
  EXPECT_EQ(topo->place(2, 2).status().code(), ErrorCode::kConfig);
  EXPECT_EQ(topo->place(0, 0).status().code(), ErrorCode::kConfig);
}

TEST(Topology, LocalRankFromEnvironment) {
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  const LocalRankInfo info = local_rank_from_env();
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_size, 4);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
  const LocalRankInfo fallback = local_rank_from_env();
  EXPECT_EQ(fallback.local_rank, 0);
  EXPECT_EQ(fallback.local_size, 1);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
}

TEST(Topology, DescribeNamesTheMapping) {
  auto topo = Topology::synthetic("pack:2 core:4 pu:2");
  ASSERT_TRUE(topo.ok());
  auto p = topo->place(0, 2);
  ASSERT_TRUE(p.ok());
  const std::string line = describe_placement(*p, 5);
  EXPECT_NE(line.find("rank 5"), std::string::npos) << line;
  EXPECT_NE(line.find("local 0/2"), std::string::npos) << line;
  EXPECT_NE(line.find("PUs 0-7"), std::string::npos) << line;
}

}  // namespace
}  // namespace strata::cpu

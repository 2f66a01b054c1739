// A rank's GPU, cores and memory node (cpu/rank_placement.h): on a synthetic 2-socket server of
// 8 GPUs (4 per socket) with NVMe drives on both sockets, the GPU, cores and node of each of 1 to
// 8 local ranks, worked out here by hand from the rule; the refusals; and on this machine, that
// a bound rank's pinned buffers have their pages on its node.
#include <gtest/gtest.h>
#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "cpu/pinned_memory.h"
#include "cpu/rank_placement.h"

namespace strata::cpu {
namespace {

// Two packages of one NUMA node each, 16 cores of 2 hyperthreads per package.
constexpr const char* kServer = "pack:2 numa:1 core:16 pu:2";
const std::vector<int> kGpuNodes = {0, 0, 0, 0, 1, 1, 1, 1};

std::vector<int> range(int begin, int end) {
  std::vector<int> v;
  for (int i = begin; i < end; ++i) v.push_back(i);
  return v;
}

Placement place(const Topology& topo, int rank, int ranks, std::vector<int> gpu_nodes,
                BindMode bind = BindMode::kAuto, std::vector<int> ids = {}) {
  PlacementRequest rq;
  rq.local_rank = rank;
  rq.local_size = ranks;
  rq.gpu_nodes = std::move(gpu_nodes);
  rq.device_ids = std::move(ids);
  rq.bind = bind;
  auto p = place_local_rank(topo, rq);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : Placement{};
}

TEST(RankPlacement, EightRanksEachTakeTheirGpuAndAQuarterOfItsSocket) {
  auto topo = Topology::synthetic(kServer);
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  ASSERT_EQ(topo->num_numa_nodes(), 2);
  std::set<int> pus;
  for (int r = 0; r < 8; ++r) {
    const Placement p = place(*topo, r, 8, kGpuNodes);
    EXPECT_EQ(p.gpu, r);
    EXPECT_EQ(p.gpu_node, r / 4);
    EXPECT_EQ(p.gpu_ranks, 1);
    EXPECT_EQ(p.cores.numa_node, r / 4);
    // Socket s's cores are 16s..16s+15; its 4 ranks take 4 each, in rank order.
    EXPECT_EQ(p.cores.cores, range(4 * r, 4 * r + 4)) << "rank " << r;
    EXPECT_EQ(p.threads(), 8);  // 4 cores of 2 hyperthreads
    EXPECT_TRUE(p.bind);
    EXPECT_EQ(p.binding.cpuset, p.cores.cpuset);
    for (int pu : p.cores.pus) EXPECT_TRUE(pus.insert(pu).second) << "PU " << pu << " twice";
  }
  EXPECT_EQ(pus.size(), 64u);
}

TEST(RankPlacement, FewerRanksThanGpusSpreadOverTheSockets) {
  auto topo = Topology::synthetic(kServer);
  ASSERT_TRUE(topo.ok());
  // 2 ranks: GPUs 0 and 4, a whole socket each.
  Placement a = place(*topo, 0, 2, kGpuNodes), b = place(*topo, 1, 2, kGpuNodes);
  EXPECT_EQ(a.gpu, 0);
  EXPECT_EQ(b.gpu, 4);
  EXPECT_EQ(a.cores.cores, range(0, 16));
  EXPECT_EQ(b.cores.cores, range(16, 32));
  EXPECT_EQ(b.cores.numa_node, 1);
  // 3 ranks: the order is 0, 4, 1, 5, ...; the first three sorted: 0, 1, 4. Socket 0's two
  // ranks halve its cores.
  const Placement c[3] = {place(*topo, 0, 3, kGpuNodes), place(*topo, 1, 3, kGpuNodes),
                          place(*topo, 2, 3, kGpuNodes)};
  EXPECT_EQ(c[0].gpu, 0);
  EXPECT_EQ(c[1].gpu, 1);
  EXPECT_EQ(c[2].gpu, 4);
  EXPECT_EQ(c[0].cores.cores, range(0, 8));
  EXPECT_EQ(c[1].cores.cores, range(8, 16));
  EXPECT_EQ(c[2].cores.cores, range(16, 32));
  // GPUs alternating between the sockets: 2 ranks take GPUs 0 and 1.
  const std::vector<int> alternating = {0, 1, 0, 1, 0, 1, 0, 1};
  EXPECT_EQ(place(*topo, 1, 2, alternating).gpu, 1);
  EXPECT_EQ(place(*topo, 1, 2, alternating).cores.numa_node, 1);
  // One rank: GPU 0 and socket 0's cores.
  const Placement one = place(*topo, 0, 1, kGpuNodes);
  EXPECT_EQ(one.gpu, 0);
  EXPECT_EQ(one.cores.cores, range(0, 16));
}

TEST(RankPlacement, ExplicitDeviceIdsAreTakenInTurn) {
  auto topo = Topology::synthetic(kServer);
  ASSERT_TRUE(topo.ok());
  const int want[4] = {2, 6, 2, 6};
  for (int r = 0; r < 4; ++r) {
    const Placement p = place(*topo, r, 4, kGpuNodes, BindMode::kAuto, {2, 6});
    EXPECT_EQ(p.gpu, want[r]);
    EXPECT_EQ(p.gpu_ranks, 2);
    // Two ranks per socket: half its cores each.
    EXPECT_EQ(p.cores.cores.size(), 8u);
    EXPECT_EQ(p.cores.numa_node, want[r] / 4);
  }
  PlacementRequest rq;
  rq.local_size = 2;
  rq.gpu_nodes = kGpuNodes;
  rq.device_ids = {0, 9};
  auto bad = place_local_rank(*topo, rq);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("`device_ids`: GPU 9 does not exist"), std::string::npos)
      << bad.status().message();
  EXPECT_NE(bad.status().message().find("0-7"), std::string::npos);
}

TEST(RankPlacement, WithoutGpuOrWithUnknownNodesTheMachineWideSplitHolds) {
  auto topo = Topology::synthetic(kServer);
  ASSERT_TRUE(topo.ok());
  for (int ranks : {1, 2, 3, 8}) {
    for (int r = 0; r < ranks; ++r) {
      auto expect = topo->place(r, ranks);
      ASSERT_TRUE(expect.ok());
      const Placement none = place(*topo, r, ranks, {});
      EXPECT_EQ(none.gpu, -1);
      EXPECT_EQ(none.cores.cores, expect->cores);
      const Placement unknown = place(*topo, r, ranks, std::vector<int>(8, -1));
      EXPECT_EQ(unknown.gpu, r % 8);
      EXPECT_EQ(unknown.cores.cores, expect->cores);
    }
  }
}

TEST(RankPlacement, BindModes) {
  auto topo = Topology::synthetic(kServer);
  ASSERT_TRUE(topo.ok());
  // numa: bound to the whole socket, threads still the rank's share.
  const Placement n = place(*topo, 5, 8, kGpuNodes, BindMode::kNuma);
  EXPECT_TRUE(n.bind);
  EXPECT_EQ(n.threads(), 8);
  EXPECT_EQ(n.binding.cores, range(16, 32));
  EXPECT_EQ(n.binding.pus.size(), 32u);
  const Placement off = place(*topo, 0, 8, kGpuNodes, BindMode::kNone);
  EXPECT_FALSE(off.bind);
  EXPECT_NE(off.describe(0).find("not bound (`bind` none)"), std::string::npos);
  // 40 ranks on 32 cores (20 per socket, GPUs shared): auto runs unbound, cores and numa refuse.
  const Placement crowded = place(*topo, 39, 40, kGpuNodes);
  EXPECT_FALSE(crowded.bind);
  EXPECT_TRUE(crowded.cores.shared);
  for (BindMode m : {BindMode::kCores, BindMode::kNuma}) {
    PlacementRequest rq;
    rq.local_rank = 3;
    rq.local_size = 40;
    rq.gpu_nodes = kGpuNodes;
    rq.bind = m;
    auto refused = place_local_rank(*topo, rq);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().message().rfind(std::string("`bind` ") + bind_mode_name(m), 0), 0u)
        << refused.status().message();
  }
  EXPECT_EQ(parse_bind_mode("numa").value(), BindMode::kNuma);
  auto bad = parse_bind_mode("socket");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("`bind`: 'socket'"), std::string::npos);
}

// An affinity the process was given (taskset, a launcher's binding) is kept by auto, never
// widened; cores and numa place the rank by the rule whatever it was given (issue 47).
TEST(RankPlacement, AutoKeepsTheAffinityTheProcessWasGiven) {
  auto topo = Topology::synthetic(kServer);
  ASSERT_TRUE(topo.ok());
  EXPECT_EQ(topo->given_cores(), range(0, 32));  // a synthetic machine: every core
  PlacementRequest rq;
  rq.local_rank = 1;
  rq.local_size = 2;
  rq.gpu_nodes = kGpuNodes;
  rq.given_cores = {20, 21, 22};
  auto kept = place_local_rank(*topo, rq);
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_EQ(kept->cores.cores, (std::vector<int>{20, 21, 22}));
  EXPECT_EQ(kept->binding.cores, kept->cores.cores);
  EXPECT_EQ(kept->threads(), 6);
  EXPECT_EQ(kept->cores.numa_node, 1);
  EXPECT_EQ(kept->cores.local_rank, 1);
  EXPECT_TRUE(kept->bind);
  EXPECT_EQ(kept->gpu, 4);  // the GPU is chosen as without an affinity
  rq.bind = BindMode::kCores;
  auto ruled = place_local_rank(*topo, rq);
  ASSERT_TRUE(ruled.ok());
  EXPECT_EQ(ruled->cores.cores, place(*topo, 1, 2, kGpuNodes, BindMode::kCores).cores.cores);
  EXPECT_NE(ruled->cores.cores, kept->cores.cores);
}

TEST(RankPlacement, TheLineNamesGpuCoresNodeAndDrives) {
  auto topo = Topology::synthetic(kServer);
  ASSERT_TRUE(topo.ok());
  PlacementRequest rq;
  rq.local_rank = 1;
  rq.local_size = 2;
  rq.gpu_nodes = kGpuNodes;
  rq.drives = {"/mnt/nvme0", "/mnt/nvme1"};
  rq.drive_nodes = {0, 1};
  auto p = place_local_rank(*topo, rq);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->describe(1),
            "rank 1: local 1/2, GPU 4 (NUMA node 1), cores [16-31] (PUs 32-63), memory on NUMA "
            "node 1, 32 threads, bound to its cores; drive /mnt/nvme0 on NUMA node 0 (another "
            "node: its transfers cross between the sockets); drive /mnt/nvme1 on NUMA node 1");
}

TEST(RankPlacement, UnknownDevicesHaveNoNode) {
  EXPECT_EQ(numa_node_of_pci("0000:ff:1f.7-no-such-device"), -1);
  EXPECT_EQ(numa_node_of_pci(""), -1);
  EXPECT_EQ(numa_node_of_path("/no/such/path"), -1);
}

// This machine: the rank's process bound, its memory policy names its node, and a pinned
// buffer allocated afterwards has every page on that node.
TEST(RankPlacement, PinnedBuffersOfABoundRankAreOnItsNode) {
  auto topo = Topology::discover();
  ASSERT_TRUE(topo.ok());
  PlacementRequest rq;  // one rank: every core of the machine
  auto p = place_local_rank(*topo, rq);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(p->bind);
  ASSERT_GE(p->cores.numa_node, 0);
  const Status applied = apply_placement(*topo, *p);
  if (!applied.ok()) GTEST_SKIP() << "the OS refused the binding: " << applied.message();
  int mode = -1;
  unsigned long mask[16] = {};
  ASSERT_EQ(syscall(SYS_get_mempolicy, &mode, mask, 1024UL, nullptr, 0UL), 0);
  // hwloc asks for a preferred node: MPOL_PREFERRED_MANY where the kernel has it.
  EXPECT_TRUE(mode == MPOL_PREFERRED || mode == MPOL_PREFERRED_MANY || mode == MPOL_BIND)
      << "policy " << mode;
  const auto node = static_cast<unsigned>(p->cores.numa_node);
  EXPECT_TRUE((mask[node / 64] >> (node % 64)) & 1UL) << "node " << node << " not in the policy";
  PinnedPool pool;
  auto buf = pool.allocate(size_t{8} << 20);
  ASSERT_TRUE(buf.ok()) << buf.status().to_string();
  auto* bytes = static_cast<char*>(buf->data());
  for (size_t off = 0; off < buf->size_bytes(); off += 4096) {
    int where = -1;
    ASSERT_EQ(syscall(SYS_get_mempolicy, &where, nullptr, 0UL, bytes + off,
                      static_cast<unsigned long>(MPOL_F_NODE | MPOL_F_ADDR)),
              0);
    ASSERT_EQ(where, p->cores.numa_node) << "page at offset " << off;
  }
}

}  // namespace
}  // namespace strata::cpu

// Rank-to-hardware placement with hwloc: which cores (and NUMA node) each local rank gets when
// several ranks share a machine, and binding the process to them so that its thread pools (CPU
// Adam's and CpuDevice's oneTBB arenas, which size themselves from the process affinity mask)
// stay on the rank's cores.
//
// Split rule (Topology::place), with k local ranks, N cores (PUs when hwloc finds no cores) and
// G NUMA nodes, cores taken in hwloc's logical order:
//   k >= N      every rank gets one core, rank r core r % N (cores are shared when k > N and the
//               placement says so with shared = true);
//   G <= k < N  NUMA-local: every node gets at least one rank, the remaining ranks go one by one
//               to the node with the most cores per rank (lowest node first on ties; never more
//               ranks than cores); each node's cores are cut into contiguous blocks whose sizes
//               differ by at most one (the first blocks are the larger ones); ranks are numbered
//               node by node;
//   k < G       whole NUMA nodes: rank r gets nodes [r*G/k, (r+1)*G/k).
// For k <= N the blocks are disjoint and cover every core. A core's PUs (hyperthreads) go with it.
//
// Ownership: a Topology owns its hwloc topology (move-only). Thread safety: const methods may be
// called concurrently; bind_process changes process-wide state.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct hwloc_topology;  // hwloc's topology type (only src/cpu includes hwloc.h)

namespace strata::cpu {

struct RankPlacement {
  int local_rank = 0;
  int local_size = 1;
  std::vector<int> cores;  // hwloc logical indices of the rank's cores
  std::vector<int> pus;    // OS indices of their processing units (the OS's CPU numbers)
  int numa_node = -1;      // OS index of the NUMA node holding most of the cores (-1: unknown)
  std::string cpuset;      // the PUs as a list string, e.g. "0-3,8-11"
  bool shared = false;     // true when more local ranks than cores: cores are shared
  int threads() const { return pus.empty() ? 1 : static_cast<int>(pus.size()); }
};

class Topology {
 public:
  // This machine's topology.
  static Result<Topology> discover();
  // An hwloc synthetic description, e.g. "pack:2 core:4 pu:2" or "pack:2 numa:2 core:2 pu:1".
  // Bad descriptions are kConfig naming the description.
  static Result<Topology> synthetic(std::string_view description);

  Topology(Topology&& other) noexcept;
  Topology& operator=(Topology&& other) noexcept;
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  ~Topology();

  int num_packages() const;
  int num_numa_nodes() const;
  int num_cores() const;  // physical cores (PUs if hwloc reports no cores)
  int num_pus() const;
  bool is_this_system() const { return this_system_; }
  std::string summary() const;  // "1 package, 1 NUMA node, 2 cores, 2 PUs"

  // The placement of local rank `local_rank` of `local_size` by the split rule above.
  Result<RankPlacement> place(int local_rank, int local_size) const;

  // The cores (hwloc logical indices, as RankPlacement::cores) of the NUMA node with OS index
  // `os_node`, in logical order; empty when there is no such node or it has no cores.
  std::vector<int> cores_of_node(int os_node) const;
  // The OS indices of the NUMA nodes that hold cores, in logical order.
  std::vector<int> nodes_with_cores() const;
  // The cores the process may run on now (its CPU affinity: every core with a PU in it), in
  // logical order; all cores for a synthetic topology or when the affinity cannot be read.
  std::vector<int> given_cores() const;
  // A placement on these cores: their PUs, cpuset and the NUMA node holding most of them (the
  // local rank fields left at 0 of 1).
  RankPlacement placement_of(std::vector<int> cores) const;

  // Binds the whole process (all its threads, and threads created later) to the placement's PUs.
  // kUnsupported for synthetic topologies or when the OS refuses (then nothing changed).
  Status bind_process(const RankPlacement& placement) const;
  // The calling thread's memory (and that of every thread it creates afterwards) preferred on
  // NUMA node `os_node`: pages are placed there when first touched while the node has room.
  // kUnsupported for synthetic topologies or when the OS refuses.
  Status bind_memory(int os_node) const;
  // Undoes both: the process on every PU of the machine, the calling thread's memory policy the
  // system's default (for benchmarks that compare bound with unbound in one run).
  Status unbind() const;

 private:
  Topology(hwloc_topology* topo, bool this_system) : topo_(topo), this_system_(this_system) {}
  hwloc_topology* topo_ = nullptr;
  bool this_system_ = false;
};

// Local rank and count from the launcher's environment (OpenMPI OMPI_COMM_WORLD_LOCAL_RANK /
// _LOCAL_SIZE, MPICH/Hydra MPI_LOCALRANKID / MPI_LOCALNRANKS); 0 of 1 when absent.
struct LocalRankInfo {
  int local_rank = 0;
  int local_size = 1;
};
LocalRankInfo local_rank_from_env();

// One line for the start-up log: "rank 1: local 1/2, cores [1], PUs 1, NUMA node 0, 1 thread".
std::string describe_placement(const RankPlacement& placement, int world_rank);

}  // namespace strata::cpu

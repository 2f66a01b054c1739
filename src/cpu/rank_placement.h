// Where a local rank runs: its GPU, its cores and the NUMA node of its memory, from one rule,
// and the NUMA node of each swap drive.
//
// The rule (place_local_rank), for local rank r of k on a machine whose topology is `topo`:
//   GPU     with `device_ids`, rank r takes ids[r % n] (each id must exist); else with G GPUs
//           and k >= G, GPU r % G (as CUDA numbers them: the visible devices of
//           CUDA_VISIBLE_DEVICES); with k < G, the ranks are spread over the NUMA nodes: GPUs
//           are taken one node at a time in turn (node order, each node's GPUs in order), the
//           first k of that list, given to the ranks in ascending GPU order (2 ranks on a
//           2-socket server of 8 GPUs get GPUs 0 and 4). No GPU (the CpuDevice): none.
//   cores   when every rank's GPU has a known NUMA node holding cores, the ranks of a node
//           share its cores in contiguous blocks whose sizes differ by at most one (local rank
//           order; a core's hyperthreads go with it); otherwise (no GPU, or its node unknown) the
//           machine-wide split of Topology::place. The rank's thread pools are sized to its
//           block (RankPlacement::threads).
//   memory  the NUMA node holding the rank's cores: the process's memory policy prefers it, so
//           every buffer allocated afterwards (pinned pools, the plan's arena, staging) has its
//           pages there from the first touch.
//   binding `bind` cores: the process on its block; numa: on every core of its node (threads
//           still sized to the block); none: neither cores nor memory bound; auto (the default):
//           cores, unless the machine has fewer cores than local ranks, then none, saying why.
//           cores or numa with fewer cores than ranks on a node is refused, naming the flag.
//   drives  each swap directory's block device's NUMA node, read from sysfs (-1 when the
//           device has none: a virtual disk, tmpfs, a single-node machine's -1), printed, a
//           drive on another node than the rank's said to be so. The swap store's I/O thread
//           stays in the rank's binding even then: it hashes and verifies every byte of the
//           rank's pinned buffers (on the rank's node), so on the drive's node it would cross
//           the socket link a second time, where the drive's DMA crosses it once either way.
//
// Values; thread-safe, except apply_placement (process-wide state).
// Settings are named by field between backticks (`bind`, `device_ids`); a front end renders them
// in its own words, as the engine's fields are (DESIGN.md §5).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "cpu/topology.h"

namespace strata::cpu {

enum class BindMode { kAuto, kNone, kCores, kNuma };
// "auto", "none", "cores", "numa"; anything else is kConfig naming `bind` and the value.
Result<BindMode> parse_bind_mode(std::string_view text);
const char* bind_mode_name(BindMode mode);

struct PlacementRequest {
  int world_rank = 0;
  int local_rank = 0;
  int local_size = 1;
  // The NUMA node (OS index) of each GPU this process can see, -1 where unknown; empty: no GPU.
  std::vector<int> gpu_nodes;
  std::vector<int> device_ids;      // `device_ids`; empty: by locality (above)
  std::vector<std::string> drives;  // the swap directories
  std::vector<int> drive_nodes;     // their NUMA nodes (-1 unknown), one per drive
  BindMode bind = BindMode::kAuto;
  // The cores the process was given (its CPU affinity, set by the user or the launcher) when they
  // are fewer than the machine's; empty: the whole machine. `bind` auto places the rank on them
  // (never wider); cores and numa place it by the rule above.
  std::vector<int> given_cores;
};

struct Placement {
  RankPlacement cores;    // the rank's block: its cores, PUs, NUMA node, local rank
  RankPlacement binding;  // what the process is bound to: the block, or its node (numa)
  int gpu = -1;           // the GPU ordinal; -1: none (CpuDevice)
  int gpu_node = -1;      // its NUMA node, -1 unknown
  int gpu_ranks = 1;      // local ranks on that GPU (they divide its memory)
  BindMode mode = BindMode::kAuto;
  bool bind = false;                                // cores and memory bound by apply_placement
  std::string unbound_why;                          // when !bind: why
  std::vector<std::pair<std::string, int>> drives;  // directory, NUMA node (-1 unknown)
  int threads() const { return cores.threads(); }   // the rank's thread pools
  // One line: "rank 1: local 1/2, GPU 4 (NUMA node 1), cores [16-19] (PUs 16-19), memory on
  // NUMA node 1, 4 threads, bound to cores; drive /mnt/a on NUMA node 1".
  std::string describe(int world_rank) const;
};

// The GPU ordinal of every local rank (above); kConfig naming `device_ids` for an id that does
// not exist.
Result<std::vector<int>> choose_gpus(int local_size, const std::vector<int>& gpu_nodes,
                                     const std::vector<int>& device_ids);

// The placement of the request's rank on `topo` (nothing is bound).
Result<Placement> place_local_rank(const Topology& topo, const PlacementRequest& request);

// Binds the process's cores and memory policy when placement.bind (topo must be this system's).
Status apply_placement(const Topology& topo, const Placement& placement);

// For tools without a GPU (bench_comm): discovers the topology, places this rank by the rule
// above (`bind` auto when `bind`, else none), binds it (logging a warning and going on unbound
// when the OS refuses) and logs its line; returns its cores.
Result<RankPlacement> place_and_bind(int world_rank, int local_rank, int local_size, bool bind);

// The NUMA node of the block device holding `path` (sysfs), -1 when unknown.
int numa_node_of_path(const std::string& path);
// The NUMA node of PCI device `bus_id` ("0000:3b:00.0"), -1 when unknown.
int numa_node_of_pci(const std::string& bus_id);

}  // namespace strata::cpu

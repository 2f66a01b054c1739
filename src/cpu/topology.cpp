#include "cpu/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

namespace strata::cpu {
namespace {

struct BitmapDeleter {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapDeleter>;

// The placement units (cores, or PUs when there are no cores) in logical order.
hwloc_obj_type_t unit_type(hwloc_topology_t topo) {
  return hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
}

// Logical index of the NUMA node whose cpuset contains the unit's (or 0 when none does).
int numa_of(hwloc_topology_t topo, hwloc_obj_t unit) {
  const int nodes = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < nodes; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (node->cpuset != nullptr && hwloc_bitmap_isincluded(unit->cpuset, node->cpuset)) return i;
  }
  return 0;
}

int parse_env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < 0 || x > 1 << 20) return fallback;
  return static_cast<int>(x);
}

}  // namespace

Result<Topology> Topology::discover() {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) {
    return make_error(ErrorCode::kInternal, "hwloc_topology_init failed");
  }
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return make_error(ErrorCode::kIo, "hwloc could not read this machine's topology");
  }
  return Topology(topo, hwloc_topology_is_thissystem(topo) != 0);
}

Result<Topology> Topology::synthetic(std::string_view description) {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) {
    return make_error(ErrorCode::kInternal, "hwloc_topology_init failed");
  }
  const std::string desc(description);
  if (hwloc_topology_set_synthetic(topo, desc.c_str()) != 0 || hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return make_error(ErrorCode::kConfig, "hwloc synthetic topology '", desc,
                      "' is not accepted (e.g. \"pack:2 core:4 pu:2\")");
  }
  return Topology(topo, false);
}

Topology::Topology(Topology&& other) noexcept
    : topo_(std::exchange(other.topo_, nullptr)), this_system_(other.this_system_) {}

Topology& Topology::operator=(Topology&& other) noexcept {
  if (this != &other) {
    if (topo_ != nullptr) hwloc_topology_destroy(topo_);
    topo_ = std::exchange(other.topo_, nullptr);
    this_system_ = other.this_system_;
  }
  return *this;
}

Topology::~Topology() {
  if (topo_ != nullptr) hwloc_topology_destroy(topo_);
}

int Topology::num_packages() const {
  return std::max(1, hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_PACKAGE));
}
int Topology::num_numa_nodes() const {
  return std::max(1, hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_NUMANODE));
}
int Topology::num_cores() const { return hwloc_get_nbobjs_by_type(topo_, unit_type(topo_)); }
int Topology::num_pus() const { return hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_PU); }

std::string Topology::summary() const {
  std::ostringstream os;
  auto plural = [&](int v, const char* what, const char* many) {
    os << v << " " << (v == 1 ? what : many);
  };
  plural(num_packages(), "package", "packages");
  os << ", ";
  plural(num_numa_nodes(), "NUMA node", "NUMA nodes");
  os << ", ";
  plural(num_cores(), "core", "cores");
  os << ", ";
  plural(num_pus(), "PU", "PUs");
  return os.str();
}

Result<RankPlacement> Topology::place(int local_rank, int local_size) const {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size) {
    return make_error(ErrorCode::kConfig, "local rank ", local_rank, " of ", local_size,
                      " is not a valid placement request (need 0 <= rank < size, size >= 1)");
  }
  const hwloc_obj_type_t type = unit_type(topo_);
  const int n_units = hwloc_get_nbobjs_by_type(topo_, type);
  if (n_units < 1) return make_error(ErrorCode::kInternal, "hwloc reports no cores or PUs");
  const int n_groups = num_numa_nodes();
  std::vector<std::vector<int>> groups(static_cast<size_t>(n_groups));
  for (int u = 0; u < n_units; ++u) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo_, type, static_cast<unsigned>(u));
    groups[static_cast<size_t>(numa_of(topo_, obj))].push_back(u);
  }
  // Nodes without cores (memory-only) take no ranks.
  std::vector<int> group_ids;
  for (int g = 0; g < n_groups; ++g) {
    if (!groups[static_cast<size_t>(g)].empty()) group_ids.push_back(g);
  }
  const int k = local_size;
  const int n_live = static_cast<int>(group_ids.size());

  RankPlacement p;
  p.local_rank = local_rank;
  p.local_size = local_size;
  if (k >= n_units) {
    p.cores = {local_rank % n_units};
    p.shared = k > n_units;
  } else if (k >= n_live) {
    std::vector<int> ranks(static_cast<size_t>(n_live), 1);
    for (int extra = k - n_live; extra > 0; --extra) {
      int best = -1;
      double best_ratio = -1.0;
      for (int i = 0; i < n_live; ++i) {
        const int cores = static_cast<int>(groups[static_cast<size_t>(group_ids[i])].size());
        if (ranks[i] >= cores) continue;
        const double ratio = static_cast<double>(cores) / ranks[i];
        if (ratio > best_ratio) {
          best_ratio = ratio;
          best = i;
        }
      }
      ++ranks[static_cast<size_t>(best)];  // k < n_units guarantees some node has room
    }
    int first = 0;
    for (int i = 0; i < n_live; ++i) {
      const int r = ranks[static_cast<size_t>(i)];
      if (local_rank < first + r) {
        const auto& cores = groups[static_cast<size_t>(group_ids[i])];
        const int m = static_cast<int>(cores.size());
        const int j = local_rank - first;
        const int base = m / r;
        const int rem = m % r;
        const int begin = j * base + std::min(j, rem);
        const int len = base + (j < rem ? 1 : 0);
        p.cores.assign(cores.begin() + begin, cores.begin() + begin + len);
        break;
      }
      first += r;
    }
  } else {
    const int g0 = local_rank * n_live / k;
    const int g1 = (local_rank + 1) * n_live / k;
    for (int i = g0; i < g1; ++i) {
      const auto& cores = groups[static_cast<size_t>(group_ids[i])];
      p.cores.insert(p.cores.end(), cores.begin(), cores.end());
    }
  }

  RankPlacement q = placement_of(std::move(p.cores));
  q.local_rank = p.local_rank;
  q.local_size = p.local_size;
  q.shared = p.shared;
  return q;
}

RankPlacement Topology::placement_of(std::vector<int> cores) const {
  RankPlacement p;
  p.cores = std::move(cores);
  const hwloc_obj_type_t type = unit_type(topo_);
  const int n_groups = num_numa_nodes();
  Bitmap set(hwloc_bitmap_alloc());
  std::vector<int> per_node(static_cast<size_t>(n_groups), 0);
  for (int u : p.cores) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo_, type, static_cast<unsigned>(u));
    if (obj == nullptr) continue;
    hwloc_bitmap_or(set.get(), set.get(), obj->cpuset);
    ++per_node[static_cast<size_t>(numa_of(topo_, obj))];
  }
  const int best_node =
      static_cast<int>(std::max_element(per_node.begin(), per_node.end()) - per_node.begin());
  hwloc_obj_t node =
      hwloc_get_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(best_node));
  p.numa_node = node != nullptr ? static_cast<int>(node->os_index) : -1;
  for (int pu = hwloc_bitmap_first(set.get()); pu != -1; pu = hwloc_bitmap_next(set.get(), pu)) {
    p.pus.push_back(pu);
  }
  char* text = nullptr;
  if (hwloc_bitmap_list_asprintf(&text, set.get()) >= 0 && text != nullptr) {
    p.cpuset = text;
    std::free(text);
  }
  return p;
}

std::vector<int> Topology::given_cores() const {
  std::vector<int> cores;
  const hwloc_obj_type_t type = unit_type(topo_);
  const int n = hwloc_get_nbobjs_by_type(topo_, type);
  Bitmap set(hwloc_bitmap_alloc());
  const bool known = this_system_ &&
                     hwloc_get_cpubind(topo_, set.get(), HWLOC_CPUBIND_PROCESS) == 0 &&
                     !hwloc_bitmap_iszero(set.get());
  for (int u = 0; u < n; ++u) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo_, type, static_cast<unsigned>(u));
    if (!known || (obj != nullptr && hwloc_bitmap_intersects(obj->cpuset, set.get()))) {
      cores.push_back(u);
    }
  }
  return cores;
}

std::vector<int> Topology::cores_of_node(int os_node) const {
  std::vector<int> cores;
  const hwloc_obj_type_t type = unit_type(topo_);
  const int n_units = hwloc_get_nbobjs_by_type(topo_, type);
  for (int u = 0; u < n_units; ++u) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo_, type, static_cast<unsigned>(u));
    hwloc_obj_t node = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_NUMANODE,
                                             static_cast<unsigned>(numa_of(topo_, obj)));
    const int os = node != nullptr ? static_cast<int>(node->os_index) : 0;
    if (os == os_node) cores.push_back(u);
  }
  return cores;
}

std::vector<int> Topology::nodes_with_cores() const {
  std::vector<int> nodes;
  const int n = hwloc_get_nbobjs_by_type(topo_, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < std::max(1, n); ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    const int os = node != nullptr ? static_cast<int>(node->os_index) : 0;
    if (!cores_of_node(os).empty()) nodes.push_back(os);
  }
  return nodes;
}

Status Topology::bind_memory(int os_node) const {
  if (!this_system_) {
    return make_error(ErrorCode::kUnsupported, "cannot bind memory on a synthetic topology");
  }
  Bitmap set(hwloc_bitmap_alloc());
  hwloc_bitmap_only(set.get(), static_cast<unsigned>(os_node));
  // Without HWLOC_MEMBIND_STRICT, hwloc asks Linux for a preferred node (MPOL_PREFERRED_MANY, or
  // MPOL_PREFERRED on older kernels): pages go to the node while it has room, elsewhere after
  // (never a failed allocation). The policy is the calling thread's, inherited by every thread
  // it creates afterwards.
  if (hwloc_set_membind(topo_, set.get(), HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_BYNODESET) != 0) {
    return make_error(ErrorCode::kUnsupported, "binding memory to NUMA node ", os_node,
                      " was refused: ", std::strerror(errno));
  }
  return ok_status();
}

Status Topology::bind_process(const RankPlacement& placement) const {
  if (!this_system_) {
    return make_error(ErrorCode::kUnsupported, "cannot bind to a synthetic topology");
  }
  if (placement.pus.empty()) return make_error(ErrorCode::kConfig, "placement has no PUs");
  Bitmap set(hwloc_bitmap_alloc());
  for (int pu : placement.pus) hwloc_bitmap_set(set.get(), static_cast<unsigned>(pu));
  if (hwloc_set_cpubind(topo_, set.get(), HWLOC_CPUBIND_PROCESS) != 0) {
    return make_error(ErrorCode::kUnsupported, "binding to PUs ", placement.cpuset,
                      " was refused: ", std::strerror(errno));
  }
  return ok_status();
}

Status Topology::unbind() const {
  if (!this_system_)
    return make_error(ErrorCode::kUnsupported, "cannot unbind a synthetic topology");
  if (hwloc_set_cpubind(topo_, hwloc_topology_get_complete_cpuset(topo_), HWLOC_CPUBIND_PROCESS) !=
      0) {
    return make_error(ErrorCode::kUnsupported, "unbinding was refused: ", std::strerror(errno));
  }
  if (hwloc_set_membind(topo_, hwloc_topology_get_complete_nodeset(topo_), HWLOC_MEMBIND_DEFAULT,
                        HWLOC_MEMBIND_BYNODESET) != 0) {
    return make_error(ErrorCode::kUnsupported,
                      "resetting the memory policy was refused: ", std::strerror(errno));
  }
  return ok_status();
}

LocalRankInfo local_rank_from_env() {
  LocalRankInfo info;
  int rank = parse_env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
  int size = parse_env_int("OMPI_COMM_WORLD_LOCAL_SIZE", -1);
  if (rank < 0 || size < 1) {
    rank = parse_env_int("MPI_LOCALRANKID", -1);
    size = parse_env_int("MPI_LOCALNRANKS", -1);
  }
  if (rank >= 0 && size >= 1 && rank < size) {
    info.local_rank = rank;
    info.local_size = size;
  }
  return info;
}

std::string describe_placement(const RankPlacement& p, int world_rank) {
  std::ostringstream os;
  os << "rank " << world_rank << ": local " << p.local_rank << "/" << p.local_size << ", cores [";
  for (size_t i = 0; i < p.cores.size(); ++i) os << (i ? "," : "") << p.cores[i];
  os << "], PUs " << p.cpuset << ", NUMA node " << p.numa_node << ", " << p.threads()
     << (p.threads() == 1 ? " thread" : " threads");
  if (p.shared) os << " (cores shared: more ranks than cores)";
  return os.str();
}

}  // namespace strata::cpu

#include "cpu/rank_placement.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/log.h"

namespace strata::cpu {
namespace {

// -1 unless `file` holds a non-negative integer.
int read_node(const std::filesystem::path& file) {
  std::ifstream in(file);
  int v = -1;
  if (!(in >> v)) return -1;
  return v >= 0 ? v : -1;
}

// "0-3,8" for {0,1,2,3,8}.
std::string ranges(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    os << (i ? "," : "") << v[i];
    if (j > i) os << "-" << v[j];
    i = j + 1;
  }
  return os.str();
}

// The k contiguous blocks of m items whose sizes differ by at most one: block j's [begin, end).
std::pair<int, int> block(int m, int k, int j) {
  const int base = m / k, rem = m % k;
  const int begin = j * base + std::min(j, rem);
  return {begin, begin + base + (j < rem ? 1 : 0)};
}

}  // namespace

Result<BindMode> parse_bind_mode(std::string_view t) {
  if (t == "auto") return BindMode::kAuto;
  if (t == "none") return BindMode::kNone;
  if (t == "cores") return BindMode::kCores;
  if (t == "numa") return BindMode::kNuma;
  return make_error(ErrorCode::kConfig, "`bind`: '", t,
                    "' is not accepted (use auto, none, cores or numa)");
}

const char* bind_mode_name(BindMode m) {
  switch (m) {
    case BindMode::kAuto: return "auto";
    case BindMode::kNone: return "none";
    case BindMode::kCores: return "cores";
    case BindMode::kNuma: return "numa";
  }
  return "?";
}

Result<std::vector<int>> choose_gpus(int k, const std::vector<int>& gpu_nodes,
                                     const std::vector<int>& ids) {
  const int g = static_cast<int>(gpu_nodes.size());
  std::vector<int> out(static_cast<size_t>(std::max(k, 0)), -1);
  if (!ids.empty()) {
    for (int id : ids) {
      if (id < 0 || id >= g) {
        return make_error(ErrorCode::kConfig, "`device_ids`: GPU ", id, " does not exist (",
                          g == 0 ? std::string("this machine has no GPU")
                                 : "GPUs 0-" + std::to_string(g - 1) + " are visible",
                          ")");
      }
    }
    for (int r = 0; r < k; ++r) out[size_t(r)] = ids[size_t(r) % ids.size()];
    return out;
  }
  if (g == 0) return out;
  if (k >= g) {
    for (int r = 0; r < k; ++r) out[size_t(r)] = r % g;
    return out;
  }
  // One node at a time in turn: node order (unknown last), each node's GPUs in order.
  std::vector<int> nodes(gpu_nodes);
  std::sort(nodes.begin(), nodes.end(),
            [](int a, int b) { return (a < 0 ? INT_MAX : a) < (b < 0 ? INT_MAX : b); });
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  std::vector<std::vector<int>> per(nodes.size());
  for (int i = 0; i < g; ++i) {
    const auto it = std::find(nodes.begin(), nodes.end(), gpu_nodes[size_t(i)]);
    per[size_t(it - nodes.begin())].push_back(i);
  }
  std::vector<int> order;
  for (size_t round = 0; order.size() < size_t(g); ++round) {
    for (const auto& p : per) {
      if (round < p.size()) order.push_back(p[round]);
    }
  }
  order.resize(size_t(k));
  std::sort(order.begin(), order.end());
  return order;
}

Result<Placement> place_local_rank(const Topology& topo, const PlacementRequest& rq) {
  const int k = rq.local_size;
  if (k < 1 || rq.local_rank < 0 || rq.local_rank >= k) {
    return make_error(ErrorCode::kConfig, "local rank ", rq.local_rank, " of ", k,
                      " is not a valid placement request");
  }
  Placement p;
  p.mode = rq.bind;
  STRATA_ASSIGN_OR_RETURN(std::vector<int> gpus, choose_gpus(k, rq.gpu_nodes, rq.device_ids));
  p.gpu = gpus[size_t(rq.local_rank)];
  auto node_of = [&](int gpu) { return gpu >= 0 ? rq.gpu_nodes[size_t(gpu)] : -1; };
  p.gpu_node = node_of(p.gpu);
  p.gpu_ranks = std::max<int>(1, static_cast<int>(std::count(gpus.begin(), gpus.end(), p.gpu)));
  for (size_t i = 0; i < rq.drives.size(); ++i) {
    p.drives.emplace_back(rq.drives[i], i < rq.drive_nodes.size() ? rq.drive_nodes[i] : -1);
  }
  // An affinity given to the process is kept: auto places the rank on its cores, never wider.
  if (rq.bind == BindMode::kAuto && !rq.given_cores.empty()) {
    p.cores = topo.placement_of(rq.given_cores);
    p.cores.local_rank = rq.local_rank;
    p.cores.local_size = k;
    p.binding = p.cores;
    p.bind = true;
    return p;
  }
  // Cores by the GPUs' nodes when every rank's GPU sits on a node with cores.
  const std::vector<int> live = topo.nodes_with_cores();
  bool by_gpu = p.gpu >= 0;
  for (int r = 0; r < k && by_gpu; ++r) {
    by_gpu = std::find(live.begin(), live.end(), node_of(gpus[size_t(r)])) != live.end();
  }
  bool crowded = false;  // more ranks than cores where the rank is
  if (by_gpu) {
    int j = 0, on_node = 0;
    for (int r = 0; r < k; ++r) {
      if (node_of(gpus[size_t(r)]) != p.gpu_node) continue;
      if (r < rq.local_rank) ++j;
      ++on_node;
    }
    const std::vector<int> cores = topo.cores_of_node(p.gpu_node);
    const int m = static_cast<int>(cores.size());
    crowded = on_node > m;
    std::vector<int> mine;
    if (crowded) {
      mine = {cores[size_t(j % m)]};
    } else {
      const auto [b, e] = block(m, on_node, j);
      mine.assign(cores.begin() + b, cores.begin() + e);
    }
    p.cores = topo.placement_of(std::move(mine));
    p.cores.shared = crowded;
  } else {
    STRATA_ASSIGN_OR_RETURN(p.cores, topo.place(rq.local_rank, k));
    crowded = p.cores.shared;
  }
  p.cores.local_rank = rq.local_rank;
  p.cores.local_size = k;
  p.binding = p.cores;
  if (rq.bind == BindMode::kNuma && p.cores.numa_node >= 0) {
    p.binding = topo.placement_of(topo.cores_of_node(p.cores.numa_node));
  }
  if (crowded && (rq.bind == BindMode::kCores || rq.bind == BindMode::kNuma)) {
    return make_error(ErrorCode::kConfig, "`bind` ", bind_mode_name(rq.bind), ": ", k,
                      " local ranks cannot each have a core of their own here (", topo.summary(),
                      "); use `bind` none or fewer ranks per machine");
  }
  if (rq.bind == BindMode::kNone) {
    p.unbound_why = "`bind` none";
  } else if (crowded) {
    p.unbound_why = "more local ranks than cores";
  } else {
    p.bind = true;
  }
  return p;
}

Status apply_placement(const Topology& topo, const Placement& p) {
  if (!p.bind) return ok_status();
  STRATA_RETURN_IF_ERROR(topo.bind_process(p.binding));
  if (p.cores.numa_node >= 0) STRATA_RETURN_IF_ERROR(topo.bind_memory(p.cores.numa_node));
  return ok_status();
}

std::string Placement::describe(int world_rank) const {
  std::ostringstream os;
  os << "rank " << world_rank << ": local " << cores.local_rank << "/" << cores.local_size;
  if (gpu >= 0) {
    os << ", GPU " << gpu << " (NUMA node "
       << (gpu_node >= 0 ? std::to_string(gpu_node) : std::string("unknown")) << ")";
  } else {
    os << ", no GPU";
  }
  os << ", cores [" << ranges(cores.cores) << "] (PUs " << cores.cpuset << "), ";
  if (bind) {
    os << "memory on NUMA node " << cores.numa_node;
  } else {
    os << "NUMA node " << cores.numa_node;
  }
  os << ", " << threads() << (threads() == 1 ? " thread" : " threads");
  if (bind) {
    os << ", bound to "
       << (mode == BindMode::kNuma ? "NUMA node " + std::to_string(cores.numa_node)
                                   : std::string("its cores"));
    if (mode == BindMode::kNuma) os << " (PUs " << binding.cpuset << ")";
  } else {
    os << ", not bound (" << unbound_why << ")";
  }
  for (const auto& [dir, node] : drives) {
    os << "; drive " << dir << " on NUMA node "
       << (node >= 0 ? std::to_string(node) : std::string("unknown"));
    if (node >= 0 && cores.numa_node >= 0 && node != cores.numa_node) {
      os << " (another node: its transfers cross between the sockets)";
    }
  }
  return os.str();
}

Result<RankPlacement> place_and_bind(int world_rank, int local_rank, int local_size, bool bind) {
  STRATA_ASSIGN_OR_RETURN(Topology topo, Topology::discover());
  PlacementRequest rq;
  rq.world_rank = world_rank;
  rq.local_rank = local_rank;
  rq.local_size = local_size;
  rq.bind = bind ? BindMode::kAuto : BindMode::kNone;
  STRATA_ASSIGN_OR_RETURN(Placement p, place_local_rank(topo, rq));
  if (Status s = apply_placement(topo, p); !s.ok()) {
    STRATA_LOG(kWarn, "rank " << world_rank << ": running unbound: " << s.message());
    p.bind = false;
    p.unbound_why = s.message();
  }
  STRATA_LOG(kInfo, "placement " << p.describe(world_rank) << " (" << topo.summary() << ")");
  return p.cores;
}

int numa_node_of_pci(const std::string& bus_id) {
  if (bus_id.empty()) return -1;
  return read_node(std::filesystem::path("/sys/bus/pci/devices") / bus_id / "numa_node");
}

int numa_node_of_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || major(st.st_dev) == 0) return -1;  // tmpfs, overlay
  std::error_code ec;
  const std::string dev = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  std::filesystem::path p = std::filesystem::canonical("/sys/dev/block/" + dev, ec);
  // From the partition or disk up to its controller: the first numa_node on the way.
  for (; !ec && p.has_relative_path() && p != "/sys/devices"; p = p.parent_path()) {
    if (std::filesystem::exists(p / "numa_node", ec)) return read_node(p / "numa_node");
    if (std::filesystem::exists(p / "device" / "numa_node", ec)) {
      return read_node(p / "device" / "numa_node");
    }
  }
  return -1;
}

}  // namespace strata::cpu

#include "scheduler/plan.h"

#include <algorithm>
#include <iterator>
#include <ostream>
#include <set>
#include <sstream>

#include "scheduler/placement.h"

namespace strata::sched {

namespace {
bool test_bit(const std::vector<uint64_t>& bits, TaskId t) {
  return (bits[static_cast<size_t>(t) / 64] >> (static_cast<size_t>(t) % 64)) & 1u;
}
void set_bit(std::vector<uint64_t>& bits, TaskId t) {
  bits[static_cast<size_t>(t) / 64] |= uint64_t{1} << (static_cast<size_t>(t) % 64);
}
}  // namespace

BufferId Plan::add_buffer(std::string name, Tier tier, uint64_t bytes, bool initially_valid) {
  Buffer b;
  b.name = std::move(name);
  b.tier = tier;
  b.bytes = bytes;
  b.initially_valid = initially_valid;
  buffers_.push_back(std::move(b));
  finalized_ = false;
  return static_cast<BufferId>(buffers_.size() - 1);
}

std::string_view work_name(Work work) {
  static constexpr std::string_view kNames[kNumWorkKinds] = {"flops",
                                                             "head flops",
                                                             "h2d bytes",
                                                             "d2h bytes",
                                                             "nvme read bytes",
                                                             "nvme write bytes",
                                                             "network bytes",
                                                             "adam elements",
                                                             "device adam elements",
                                                             "host bytes",
                                                             "nvme ops",
                                                             "network reduce bytes",
                                                             "collective calls",
                                                             "reducing collective calls",
                                                             "device link bytes",
                                                             "device link reduce bytes",
                                                             "device collective calls",
                                                             "device reducing calls",
                                                             "device bytes"};
  return kNames[static_cast<int>(work)];
}

void Plan::add_work(TaskId task, Work work, double amount) {
  if (task < 0 || static_cast<size_t>(task) >= tasks_.size()) {
    if (build_error_.empty())
      build_error_ = "add_work names no task (" + std::to_string(task) + ")";
    return;
  }
  tasks_[static_cast<size_t>(task)].work[static_cast<int>(work)] += amount;
}

TaskId Plan::add(std::string name, Lane lane, TaskFn fn, std::vector<TaskId> deps) {
  Task t;
  t.name = std::move(name);
  t.lane = lane;
  t.fn = std::move(fn);
  t.deps = std::move(deps);
  tasks_.push_back(std::move(t));
  finalized_ = false;
  return static_cast<TaskId>(tasks_.size() - 1);
}

void Plan::depend(TaskId task, TaskId on) {
  if (task < 0 || static_cast<size_t>(task) >= tasks_.size()) {
    if (build_error_.empty()) {
      build_error_ =
          "depend(" + std::to_string(task) + ", " + std::to_string(on) + ") names no such task";
    }
    return;
  }
  tasks_[static_cast<size_t>(task)].deps.push_back(on);
  finalized_ = false;
}

#define STRATA_PLAN_ACCESS(method, list, field)                                                  \
  void Plan::method(TaskId task, BufferId buffer) {                                              \
    if (task < 0 || static_cast<size_t>(task) >= tasks_.size() || buffer < 0 ||                  \
        static_cast<size_t>(buffer) >= buffers_.size()) {                                        \
      if (build_error_.empty()) {                                                                \
        build_error_ = std::string(#method "(task ") + std::to_string(task) + ", buffer " +      \
                       std::to_string(buffer) + ") names no such one";                           \
      }                                                                                          \
      return;                                                                                    \
    }                                                                                            \
    tasks_[static_cast<size_t>(task)].list.push_back(buffer);                                    \
    if (field != nullptr) {                                                                      \
      TaskId* slot = field;                                                                      \
      if (*slot != -1 && build_error_.empty()) {                                                 \
        build_error_ =                                                                           \
            "buffer '" + buffers_[static_cast<size_t>(buffer)].name + "' is " #method "d twice"; \
      }                                                                                          \
      *slot = task;                                                                              \
    }                                                                                            \
    finalized_ = false;                                                                          \
  }
STRATA_PLAN_ACCESS(acquire, acquires, &buffers_[static_cast<size_t>(buffer)].acquired_by)
STRATA_PLAN_ACCESS(release, releases, &buffers_[static_cast<size_t>(buffer)].released_by)
STRATA_PLAN_ACCESS(reads, reads, static_cast<TaskId*>(nullptr))
STRATA_PLAN_ACCESS(writes, writes, static_cast<TaskId*>(nullptr))
#undef STRATA_PLAN_ACCESS

size_t Plan::num_memory_deps() const {
  size_t n = 0;
  for (const auto& t : tasks_) n += t.memory_deps.size();
  return n;
}

void Plan::for_each_predecessor(TaskId task, const std::function<void(TaskId)>& fn) const {
  const Task& t = tasks_[static_cast<size_t>(task)];
  for (TaskId d : t.deps) fn(d);
  for (TaskId d : t.memory_deps) fn(d);
  if (!lane_prev_.empty() && lane_prev_[static_cast<size_t>(task)] >= 0) {
    fn(lane_prev_[static_cast<size_t>(task)]);
  }
}

void Plan::successors(std::vector<std::vector<TaskId>>& succ, std::vector<int>& indeg) const {
  const size_t n = tasks_.size();
  succ.assign(n, {});
  indeg.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    for_each_predecessor(static_cast<TaskId>(i), [&](TaskId p) {
      succ[static_cast<size_t>(p)].push_back(static_cast<TaskId>(i));
      ++indeg[i];
    });
  }
}

Status Plan::check_structure() const {
  if (!build_error_.empty()) return make_error(ErrorCode::kConfig, "plan: ", build_error_);
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    if (static_cast<int>(t.lane) >= kNumLanes) {
      return make_error(ErrorCode::kConfig, "plan: task '", t.name, "' has no lane (",
                        static_cast<int>(t.lane), ")");
    }
    if (!t.fn) return make_error(ErrorCode::kConfig, "plan: task '", t.name, "' has no function");
    for (TaskId d : t.deps) {
      if (d < 0 || static_cast<size_t>(d) >= tasks_.size() || static_cast<size_t>(d) == i) {
        return make_error(ErrorCode::kConfig, "plan: task '", t.name, "' depends on task ", d,
                          ", which is not another task of the plan");
      }
    }
  }
  return ok_status();
}

Status Plan::check_accesses(const std::vector<std::vector<uint64_t>>& ancestors) const {
  auto before = [&](TaskId a, TaskId b) {  // a == b or a is an ancestor of b
    return a == b || test_bit(ancestors[static_cast<size_t>(b)], a);
  };
  std::vector<std::vector<TaskId>> writers(buffers_.size());
  for (size_t i = 0; i < tasks_.size(); ++i) {
    for (BufferId b : tasks_[i].writes) writers[static_cast<size_t>(b)].push_back(TaskId(i));
  }
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    const auto id = static_cast<TaskId>(i);
    auto check_lifetime = [&](BufferId b) -> Status {
      const Buffer& buf = buffers_[static_cast<size_t>(b)];
      if (buf.acquired_by >= 0 && !before(buf.acquired_by, id)) {
        return make_error(ErrorCode::kConfig, "plan: task '", t.name, "' uses buffer '", buf.name,
                          "' without depending on '", task(buf.acquired_by).name,
                          "', which acquires it");
      }
      if (buf.released_by >= 0 && !before(id, buf.released_by)) {
        return make_error(ErrorCode::kConfig, "plan: task '", t.name, "' uses buffer '", buf.name,
                          "' but '", task(buf.released_by).name,
                          "', which releases it, does not depend on it");
      }
      return ok_status();
    };
    for (BufferId b : t.writes) STRATA_RETURN_IF_ERROR(check_lifetime(b));
    for (BufferId b : t.reads) {
      STRATA_RETURN_IF_ERROR(check_lifetime(b));
      const Buffer& buf = buffers_[static_cast<size_t>(b)];
      if (buf.initially_valid && buf.acquired_by < 0) continue;
      bool written = false;
      for (TaskId w : writers[static_cast<size_t>(b)]) {
        if (w != id && before(w, id)) written = true;
      }
      if (!written) {
        return make_error(ErrorCode::kConfig, "plan: task '", t.name, "' reads buffer '", buf.name,
                          "' before any task it depends on writes it");
      }
    }
  }
  // A release after its acquire, and no two accesses of a buffer unordered when one writes.
  std::vector<std::vector<std::pair<TaskId, bool>>> accesses(buffers_.size());
  for (size_t i = 0; i < tasks_.size(); ++i) {
    for (BufferId b : tasks_[i].reads) accesses[size_t(b)].emplace_back(TaskId(i), false);
    for (BufferId b : tasks_[i].writes) accesses[size_t(b)].emplace_back(TaskId(i), true);
  }
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Buffer& buf = buffers_[b];
    if (buf.acquired_by >= 0 && buf.released_by >= 0 && !before(buf.acquired_by, buf.released_by)) {
      return make_error(ErrorCode::kConfig, "plan: buffer '", buf.name, "' is released by '",
                        task(buf.released_by).name, "', which does not depend on '",
                        task(buf.acquired_by).name, "', which acquires it");
    }
    const auto& acc = accesses[b];
    for (size_t x = 0; x < acc.size(); ++x) {
      for (size_t y = x + 1; y < acc.size(); ++y) {
        const auto [tx, wx] = acc[x];
        const auto [ty, wy] = acc[y];
        if (tx == ty || !(wx || wy) || before(tx, ty) || before(ty, tx)) continue;
        return make_error(ErrorCode::kConfig, "plan: tasks '", task(tx).name, "' and '",
                          task(ty).name, "' both use buffer '", buf.name,
                          "' and one writes it, but neither depends on the other");
      }
    }
  }
  return ok_status();
}

void Plan::dump(std::ostream& os) const {
  auto ids = [&os](const char* what, const std::vector<int32_t>& v) {
    if (v.empty()) return;
    os << ' ' << what << '=';
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  };
  os << "plan: " << tasks_.size() << " tasks, " << buffers_.size() << " buffers, "
     << (finalized_ ? "finalized" : "not finalized") << '\n';
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Buffer& x = buffers_[b];
    os << "buffer " << b << ' ' << x.name << " tier=" << tier_name(x.tier) << " bytes=" << x.bytes
       << " valid=" << x.initially_valid << " acquired_by=" << x.acquired_by
       << " released_by=" << x.released_by << " offset=" << x.offset << '\n';
  }
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const Task& x = tasks_[t];
    os << "task " << t << ' ' << x.name << " lane=" << lane_name(x.lane);
    ids("deps", x.deps);
    ids("memory_deps", x.memory_deps);
    ids("acquires", x.acquires);
    ids("releases", x.releases);
    ids("reads", x.reads);
    ids("writes", x.writes);
    for (int w = 0; w < kNumWorkKinds; ++w) {
      if (x.work[w] != 0.0)
        os << " [" << work_name(static_cast<Work>(w)) << ' ' << x.work[w] << ']';
    }
    os << '\n';
  }
  ids("order", order_);
  os << '\n';
  for (int t = 0; t < kNumTiers; ++t) {
    os << "peak " << tier_name(static_cast<Tier>(t)) << ' ' << peak_[t] << " unbounded "
       << unbounded_peak_[t] << '\n';
  }
}

uint64_t Plan::peak_bytes_of(const std::function<bool(BufferId)>& which) const {
  uint64_t live = 0;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b].acquired_by < 0 && which(BufferId(b))) live += buffers_[b].bytes;
  }
  uint64_t peak = live;
  for (TaskId t : order_) {
    const Task& task_ref = tasks_[static_cast<size_t>(t)];
    for (BufferId b : task_ref.acquires) {
      if (which(b)) live += buffers_[static_cast<size_t>(b)].bytes;
    }
    peak = std::max(peak, live);
    for (BufferId b : task_ref.releases) {
      if (which(b)) live -= buffers_[static_cast<size_t>(b)].bytes;
    }
  }
  return peak;
}

Status Plan::finalize(const Budgets& budgets) {
  finalized_ = false;
  STRATA_RETURN_IF_ERROR(check_structure());
  const size_t n = tasks_.size();
  // Implied edges of in-order lanes, then Kahn's algorithm for the cycle check.
  lane_prev_.assign(n, -1);
  for (auto& lt : lane_tasks_) lt.clear();
  TaskId last[kNumLanes];
  std::fill(std::begin(last), std::end(last), TaskId{-1});
  for (size_t i = 0; i < n; ++i) {
    const int lane = static_cast<int>(tasks_[i].lane);
    if (is_in_order_lane(tasks_[i].lane)) lane_prev_[i] = last[lane];
    last[lane] = static_cast<TaskId>(i);
    lane_tasks_[lane].push_back(static_cast<TaskId>(i));
  }
  for (auto& t : tasks_) t.memory_deps.clear();
  std::vector<std::vector<TaskId>> succ;
  std::vector<int> indeg;
  successors(succ, indeg);
  std::vector<TaskId> topo;
  std::set<TaskId> ready;
  for (size_t i = 0; i < n; ++i) {
    if (indeg[i] == 0) ready.insert(static_cast<TaskId>(i));
  }
  while (!ready.empty()) {
    const TaskId t = *ready.begin();
    ready.erase(ready.begin());
    topo.push_back(t);
    for (TaskId s : succ[static_cast<size_t>(t)]) {
      if (--indeg[static_cast<size_t>(s)] == 0) ready.insert(s);
    }
  }
  if (topo.size() != n) {
    std::ostringstream names;
    int shown = 0;
    for (size_t i = 0; i < n && shown < 4; ++i) {
      if (indeg[i] > 0) names << (shown++ ? ", '" : "'") << tasks_[i].name << "'";
    }
    return make_error(ErrorCode::kConfig, "plan: dependency cycle among ", n - topo.size(),
                      " tasks (counting the order of in-order lanes), e.g. ", names.str());
  }
  std::vector<std::vector<uint64_t>> ancestors(n, std::vector<uint64_t>((n + 63) / 64, 0));
  for (TaskId t : topo) {
    for_each_predecessor(t, [&](TaskId p) {
      auto& a = ancestors[static_cast<size_t>(t)];
      const auto& pa = ancestors[static_cast<size_t>(p)];
      for (size_t w = 0; w < a.size(); ++w) a[w] |= pa[w];
      set_bit(a, p);
    });
  }
  STRATA_RETURN_IF_ERROR(check_accesses(ancestors));
  // Level: the longest chain of predecessors, an estimate of when the task can start.
  std::vector<int> level(n, 0);
  for (TaskId t : topo) {
    for_each_predecessor(
        t, [&](TaskId p) { level[size_t(t)] = std::max(level[size_t(t)], level[size_t(p)] + 1); });
  }
  STRATA_RETURN_IF_ERROR(place(budgets, level, ancestors, /*bounded=*/false));
  for (int tier = 0; tier < kNumTiers; ++tier) unbounded_peak_[tier] = peak_[tier];
  bool over = false;
  for (int tier = 0; tier < kNumTiers; ++tier) over = over || peak_[tier] > budgets.bytes[tier];
  if (over) {
    for (auto& t : tasks_) t.memory_deps.clear();
    STRATA_RETURN_IF_ERROR(place(budgets, level, ancestors, /*bounded=*/true));
  }
  finalized_ = true;
  return ok_status();
}

Status Plan::place(const Budgets& budgets, const std::vector<int>& level,
                   const std::vector<std::vector<uint64_t>>& ancestors, bool bounded) {
  const size_t n = tasks_.size();
  Placement arena[kNumTiers];
  for (int tier = 0; tier < kNumTiers; ++tier) {
    arena[tier] = Placement(bounded ? budgets.bytes[tier] : UINT64_MAX,
                            Tier(tier) == Tier::kDevice ? 256 : 4096);
  }
  auto tier_of = [&](BufferId b) {
    return static_cast<int>(buffers_[static_cast<size_t>(b)].tier);
  };
  // Buffers not acquired by a task are live from the start of the step.
  for (size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b].acquired_by >= 0) continue;
    std::vector<TaskId> unused;
    if (!arena[tier_of(BufferId(b))].allocate(BufferId(b), buffers_[b].bytes, unused)) {
      const int tier = tier_of(BufferId(b));
      return make_error(ErrorCode::kOutOfMemory, "plan: the whole-step buffers need more than the ",
                        tier_name(Tier(tier)), " budget of ", budgets.bytes[tier],
                        " bytes (buffer '", buffers_[b].name, "' of ", buffers_[b].bytes,
                        " bytes does not fit; ", arena[tier].used_bytes(), " bytes placed)");
    }
  }
  std::vector<std::vector<TaskId>> succ;
  std::vector<int> indeg;
  successors(succ, indeg);
  // Ready tasks by (level, plan order).
  auto earlier = [&](TaskId a, TaskId b) {
    return level[size_t(a)] != level[size_t(b)] ? level[size_t(a)] < level[size_t(b)] : a < b;
  };
  std::set<TaskId, decltype(earlier)> ready(earlier);
  for (size_t i = 0; i < n; ++i) {
    if (indeg[i] == 0) ready.insert(static_cast<TaskId>(i));
  }
  order_.clear();
  while (!ready.empty()) {
    // Walk as eagerly as the run-time will: the first ready task that acquires memory and fits
    // goes first (read-ahead as far as the budget allows); otherwise the first ready task that
    // acquires nothing.
    TaskId chosen = -1;
    std::vector<TaskId> mem_deps;
    for (TaskId t : ready) {
      if (tasks_[static_cast<size_t>(t)].acquires.empty()) continue;
      Placement trial[kNumTiers] = {arena[0], arena[1]};
      mem_deps.clear();
      bool fits = true;
      // Memory released by an ancestor of t is reused first: that adds no wait.
      auto after = [&](TaskId r) { return test_bit(ancestors[static_cast<size_t>(t)], r); };
      for (BufferId b : tasks_[static_cast<size_t>(t)].acquires) {
        fits = fits && trial[tier_of(b)].allocate(b, buffers_[static_cast<size_t>(b)].bytes,
                                                  mem_deps, after);
      }
      if (fits) {
        chosen = t;
        arena[0] = std::move(trial[0]);
        arena[1] = std::move(trial[1]);
        break;
      }
    }
    if (chosen < 0) {
      mem_deps.clear();
      for (TaskId t : ready) {
        if (tasks_[static_cast<size_t>(t)].acquires.empty()) {
          chosen = t;
          break;
        }
      }
    }
    if (chosen < 0) {
      // Stuck: every ready task acquires memory that does not fit. Report the first one.
      const Task& t = tasks_[static_cast<size_t>(*ready.begin())];
      BufferId want = t.acquires.front();
      for (BufferId b : t.acquires) {
        Placement trial = arena[tier_of(b)];
        std::vector<TaskId> unused;
        if (!trial.allocate(b, buffers_[static_cast<size_t>(b)].bytes, unused)) {
          want = b;
          break;
        }
      }
      const int tier = tier_of(want);
      std::ostringstream holders;
      int shown = 0;
      for (const auto& [buf, bytes] : arena[tier].largest_live(5)) {
        const Buffer& hb = buffers_[static_cast<size_t>(buf)];
        holders << (shown++ ? ", '" : "'") << hb.name << "' (" << bytes << " bytes, "
                << (hb.acquired_by >= 0 ? "acquired by '" + task(hb.acquired_by).name + "'"
                                        : std::string("whole step"))
                << ")";
      }
      return make_error(ErrorCode::kOutOfMemory, "plan does not fit the ", tier_name(Tier(tier)),
                        " budget: its peak is ", unbounded_peak_[tier], " bytes, the budget ",
                        budgets.bytes[tier], " bytes; task '", t.name, "' cannot acquire '",
                        buffers_[static_cast<size_t>(want)].name, "' (",
                        buffers_[static_cast<size_t>(want)].bytes, " bytes) while ",
                        arena[tier].used_bytes(), " bytes are held by ", holders.str(),
                        " (placement reads ahead greedily: if another order fits, make the task "
                        "that should wait depend on the one that should go first)");
    }
    ready.erase(chosen);
    Task& task_ref = tasks_[static_cast<size_t>(chosen)];
    std::sort(mem_deps.begin(), mem_deps.end());
    mem_deps.erase(std::unique(mem_deps.begin(), mem_deps.end()), mem_deps.end());
    for (TaskId d : mem_deps) {
      if (d != chosen &&
          std::find(task_ref.deps.begin(), task_ref.deps.end(), d) == task_ref.deps.end()) {
        task_ref.memory_deps.push_back(d);
      }
    }
    for (BufferId b : task_ref.releases) {
      if (!arena[tier_of(b)].release(b, chosen)) {
        return make_error(ErrorCode::kInternal, "plan: '", task_ref.name, "' releases buffer '",
                          buffers_[static_cast<size_t>(b)].name, "', which was not placed");
      }
    }
    order_.push_back(chosen);
    for (TaskId s : succ[static_cast<size_t>(chosen)]) {
      if (--indeg[static_cast<size_t>(s)] == 0) ready.insert(s);
    }
  }
  for (int tier = 0; tier < kNumTiers; ++tier) peak_[tier] = arena[tier].capacity_bytes();
  for (size_t b = 0; b < buffers_.size(); ++b) {
    buffers_[b].offset = arena[tier_of(BufferId(b))].offset_of(BufferId(b));
  }
  return ok_status();
}

}  // namespace strata::sched

#include "scheduler/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <queue>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

namespace strata::sched {

std::string Prediction::describe() const {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << "predicted step " << step_s * 1e3 << " ms; busy";
  for (int l = 0; l < kNumLanes; ++l) {
    os << (l == 0 ? " " : ", ") << lane_name(static_cast<Lane>(l)) << " " << busy_s[l] * 1e3;
  }
  os << " ms; exposed transfer " << exposed_s * 1e3 << " ms";
  return os.str();
}

Result<Prediction> simulate(const Plan& plan, const Rates& rates, const std::vector<bool>* active) {
  if (!plan.finalized()) {
    return make_error(ErrorCode::kConfig, "cost model: the plan is not finalized");
  }
  const size_t n = plan.num_tasks();
  Prediction pred;
  // Whether task i does its work in the replay simulated (`active`).
  auto on = [active](size_t i) { return active == nullptr || i >= active->size() || (*active)[i]; };
  std::vector<double> duration(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const Plan::Task& t = plan.task(TaskId(i));
    duration[i] = rates.task_overhead_s;
    if (!on(i)) continue;
    for (int k = 0; k < kNumWorkKinds; ++k) {
      if (t.work[k] == 0.0) continue;
      const double r = rates.per_second[k];
      if (!(r > 0.0) || !std::isfinite(r)) {
        return make_error(ErrorCode::kConfig, "cost model: no rate for ",
                          work_name(static_cast<Work>(k)), " (task '", t.name, "')");
      }
      duration[i] += t.work[k] / r;
      pred.work[k] += t.work[k];
    }
  }
  // Hand-offs: the compute tasks, in lane order, that are the first to depend on a transfer.
  if (rates.handoff_s > 0.0) {
    std::vector<bool> waited(n, false);
    for (TaskId t : plan.lane_tasks(Lane::kCompute)) {
      if (!on(size_t(t))) continue;
      bool fresh = false;
      plan.for_each_predecessor(t, [&](TaskId p) {
        if (!is_transfer_lane(plan.task(p).lane) || !on(size_t(p))) return;
        fresh = fresh || !waited[size_t(p)];
        waited[size_t(p)] = true;
      });
      if (fresh) duration[size_t(t)] += rates.handoff_s;
    }
  }
  std::vector<int> pos(n, 0);
  for (size_t i = 0; i < plan.order().size(); ++i) pos[size_t(plan.order()[i])] = int(i);
  std::vector<std::vector<TaskId>> succ(n);
  std::vector<int> remaining(n, 0);
  for (size_t i = 0; i < n; ++i) {
    plan.for_each_predecessor(TaskId(i), [&](TaskId p) {
      succ[size_t(p)].push_back(TaskId(i));
      ++remaining[i];
    });
  }
  int capacity[kNumLanes];
  for (int l = 0; l < kNumLanes; ++l) {
    const Lane lane = static_cast<Lane>(l);
    capacity[l] = is_in_order_lane(lane) ? 1
                  : lane == Lane::kNvme  ? std::max(1, rates.nvme_workers)
                                         : std::max(1, rates.cpu_workers);
  }
  auto uses_cores = [&](Lane lane) { return rates.shared_cores && lane != Lane::kNvme; };
  // An nvme task's CPU on the shared cores (active tasks only).
  auto nvme_cpu = [&](TaskId t) {
    if (!rates.shared_cores || !on(size_t(t))) return 0.0;
    const Plan::Task& task = plan.task(t);
    return task.work[int(Work::kNvmeOps)] * rates.nvme_cpu_op_s +
           (task.work[int(Work::kNvmeReadBytes)] + task.work[int(Work::kNvmeWriteBytes)]) *
               rates.nvme_cpu_byte_s;
  };
  std::set<std::pair<int, TaskId>> ready;  // by plan-walk position
  for (size_t i = 0; i < n; ++i) {
    if (remaining[i] == 0) ready.insert({pos[i], TaskId(i)});
  }
  using Running = std::pair<double, TaskId>;  // (end time, task)
  std::priority_queue<Running, std::vector<Running>, std::greater<>> running;
  std::vector<Running> disk;  // (work left at the task's own pace, task): Rates::shared_disk
  std::vector<TaskId> finished;
  std::vector<uint8_t> on_disk(n, 0);  // 1: a shared disk's task being dispatched, 2: on it
  std::vector<double> ready_at(n, 0.0), end(n, 0.0);
  std::vector<double> due(n, 0.0);  // a running task's end: `running` entries of others are stale
  TaskId on_core = -1;              // the shared cores' running task (one at a time), or none
  double backlog = 0.0, backlog_at = 0.0;  // nvme CPU left over while the cores were idle
  std::vector<TaskId> last_pred(n, -1);    // the predecessor that completed last
  int lane_running[kNumLanes] = {};
  double now = 0.0, compute_free_at = 0.0;
  size_t done = 0;
  while (done < n) {
    for (auto it = ready.begin(); it != ready.end();) {
      const TaskId t = it->second;
      const Lane lane = plan.task(t).lane;
      const int l = static_cast<int>(lane);
      if (lane_running[l] >= capacity[l] || (uses_cores(lane) && on_core >= 0)) {
        ++it;
        continue;
      }
      ++lane_running[l];
      if (lane == Lane::kCompute) {
        const double gap = now - std::max(compute_free_at, 0.0);
        const TaskId p = last_pred[size_t(t)];
        if (gap > 0.0 && p >= 0 && is_transfer_lane(plan.task(p).lane)) pred.exposed_s += gap;
      }
      // A shared disk's task: its dispatch first (a thread's, not shared), then its work on the
      // disk.
      const bool shares = lane == Lane::kNvme && rates.shared_disk;
      if (shares) on_disk[size_t(t)] = 1;
      due[size_t(t)] = now + (shares ? rates.task_overhead_s : duration[size_t(t)]);
      running.push({due[size_t(t)], t});
      // The disk's requests' CPU (nvme_cpu): added to the cores' running task, or while they
      // are idle kept, less the idle time since, for the next one.
      const double idle = backlog > 0.0 ? std::max(0.0, backlog - (now - backlog_at)) : 0.0;
      if (uses_cores(lane)) {
        on_core = t;
        due[size_t(t)] += idle;
        if (idle > 0.0) running.push({due[size_t(t)], t});
        backlog = 0.0;
      }
      if (lane == Lane::kNvme) {
        const double cpu = nvme_cpu(t);
        if (cpu > 0.0 && on_core >= 0) {
          due[size_t(on_core)] += cpu;
          running.push({due[size_t(on_core)], on_core});
        } else if (cpu > 0.0) {
          backlog = idle + cpu;
          backlog_at = now;
        }
      }
      it = ready.erase(it);
    }
    if (running.empty() && disk.empty()) {
      return make_error(ErrorCode::kInternal, "cost model: ", n - done,
                        " tasks can never start (the plan has a cycle)");
    }
    // The disk's tasks progress at 1/k of their own pace while k of them run (their dispatch
    // apart: it is a thread's, not the disk's); a draining disk completes them all when their
    // work is done, their total falling at the disk's pace.
    const double k = double(disk.size());
    double next = running.empty() ? HUGE_VAL : running.top().first;
    double left = 0.0;
    for (const Running& d : disk) {
      left += d.first;
      if (!rates.disk_drains) next = std::min(next, now + d.first * k);
    }
    left = std::max(left, 0.0);  // (the tasks' shares, past their own work, sum to about 0)
    if (rates.disk_drains && !disk.empty()) next = std::min(next, now + left);
    for (int l = 0; l < kNumLanes; ++l) {
      if (lane_running[l] > 0) pred.busy_s[l] += next - now;
    }
    finished.clear();
    const bool drained = rates.disk_drains && now + left <= next;  // as `next` was computed
    for (auto d = disk.begin(); d != disk.end();) {
      if (drained || (!rates.disk_drains && now + d->first * k <= next)) {  // (exact, as above)
        finished.push_back(d->second);
        d = disk.erase(d);
      } else {
        d->first -= (next - now) / k;
        ++d;
      }
    }
    now = next;
    while (!running.empty() && running.top().first <= now) {
      const auto [at, t] = running.top();
      running.pop();
      if (at != due[size_t(t)]) continue;  // its end moved later (nvme_cpu), or taken already
      due[size_t(t)] = NAN;  // an entry of the same time (a rounding's worth added) is not taken
      if (on_disk[size_t(t)] == 1) {  // dispatched: to the disk
        on_disk[size_t(t)] = 2;
        const double work = duration[size_t(t)] - rates.task_overhead_s;
        if (work > 0.0) {
          disk.push_back({work, t});
          continue;
        }
      }
      finished.push_back(t);
    }
    for (const TaskId t : finished) {
      ++done;
      end[size_t(t)] = now;
      const Lane lane = plan.task(t).lane;
      --lane_running[static_cast<int>(lane)];
      if (uses_cores(lane)) on_core = -1;
      if (lane == Lane::kCompute) compute_free_at = now;
      for (TaskId s : succ[size_t(t)]) {
        if (now >= ready_at[size_t(s)]) {
          ready_at[size_t(s)] = now;
          last_pred[size_t(s)] = t;
        }
        if (--remaining[size_t(s)] == 0) ready.insert({pos[size_t(s)], s});
      }
    }
  }
  pred.step_s = now;
  return pred;
}

}  // namespace strata::sched
